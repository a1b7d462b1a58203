//! The wall clock the proxy reads, in Unix milliseconds: one function every layer may
//! call, so reading the time never ties a module to the one that happened to define it.

/// Unix milliseconds now; 0 if the system clock stands before 1970.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}
