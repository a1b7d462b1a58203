//! The exporting threads run at a lower scheduling priority than the request threads.
//!
//! A span waits in the queue for its batch anyway: a post that gets the core a little
//! later costs nothing, while an event loop kept waiting behind the exporter is a
//! request's latency. The exporter of a proxy on few cores, one request at a time, cost
//! the requests a few percent of their speed at the same priority (`load-tests`).
//! Under a load that leaves no core idle, a nicer thread still gets its share of the
//! cores, a tenth of a request thread's at 10 (the kernel's weights: 110 against
//! 1,024): enough for the exporter's few percent of a core, so spans are late, not lost.
//!
//! On Linux a thread's nice value is its own and a new thread starts with its
//! creator's: lowered on a thread before it starts another (the blocking HTTP client's
//! runtime thread), it is lowered on both.

/// How much nicer than the process the exporting threads are (a nice value is capped at
/// 19; raising one needs no privilege).
pub const NICER_BY: i32 = 10;

/// Lowers the calling thread's priority by [`NICER_BY`]; where that fails (a sandbox
/// refusing the call), the thread keeps its priority and says so in a debug line.
pub fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::nice(NICER_BY) {
        tracing::debug!("tracing: the exporting thread keeps its priority: {error}");
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
pub mod tests {
    use std::fs;

    use rustix::process::{getpriority_process, Pid};

    /// The nice value of each of this process's threads named `name` (as the kernel
    /// keeps it: its first 15 bytes).
    pub fn nice_of_threads(name: &str) -> Vec<i32> {
        let name = &name[..name.len().min(15)];
        let mut nices = Vec::new();
        for task in fs::read_dir("/proc/self/task").unwrap().flatten() {
            let Ok(comm) = fs::read_to_string(task.path().join("comm")) else {
                continue; // the thread ended meanwhile
            };
            let tid = task.file_name().to_str().and_then(|tid| tid.parse().ok());
            let Some(tid) = tid.and_then(Pid::from_raw) else {
                continue;
            };
            if comm.trim_end() == name {
                // On Linux a "process" priority asked of a thread id is that thread's.
                if let Ok(nice) = getpriority_process(Some(tid)) {
                    nices.push(nice);
                }
            }
        }
        nices
    }

    /// This thread's nice value.
    pub fn own_nice() -> i32 {
        getpriority_process(None).unwrap()
    }

    /// The nice value of an exporting thread started from this one.
    pub fn lowered_nice() -> i32 {
        (own_nice() + super::NICER_BY).min(19)
    }

    #[test]
    fn a_thread_started_by_a_lowered_one_is_lowered_too() {
        let expected = lowered_nice();
        let nices = std::thread::spawn(|| {
            super::yield_to_requests();
            let child = std::thread::Builder::new()
                .name("nicer-child".into())
                .spawn(own_nice)
                .unwrap();
            (own_nice(), child.join().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(nices, (expected, expected));
    }
}
