//! Prefixed, ULID-based identifiers for registry records.
//!
//! An identifier is `<prefix>_<26 Crockford base32 characters>`, e.g.
//! `agt_01JD6Z5Q4T8W3N6XK2P9R7M1CV`. The prefix tells a reader (and a log search) what a bare
//! id refers to; the ULID sorts by creation time.

use std::sync::Mutex;

use rand::RngCore;

/// The kinds of record that carry a prefixed identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Tenant,
    User,
    ApiKey,
    Session,
    Team,
    Agent,
    AuditEvent,
    Heartbeat,
    Usage,
    ManagedKey,
    BudgetLimit,
    RiskClassification,
    /// A running process of Warden's own: a control-plane replica, a proxy, or one
    /// proxy's state stream.
    Instance,
    NotificationChannel,
    /// One event's delivery to one channel; receivers deduplicate on it.
    NotificationDelivery,
    Fria,
    Incident,
    Anomaly,
    Checkout,
    SsoConfig,
    McpServer,
}

impl IdKind {
    /// The short prefix written before the underscore.
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Tenant => "ten",
            IdKind::User => "usr",
            IdKind::ApiKey => "key",
            IdKind::Session => "ses",
            IdKind::Team => "team",
            IdKind::Agent => "agt",
            IdKind::AuditEvent => "evt",
            IdKind::Heartbeat => "hb",
            IdKind::Usage => "use",
            IdKind::ManagedKey => "mk",
            IdKind::BudgetLimit => "bud",
            IdKind::RiskClassification => "rsk",
            IdKind::Instance => "ins",
            IdKind::NotificationChannel => "nch",
            IdKind::NotificationDelivery => "msg",
            IdKind::Fria => "fria",
            IdKind::Incident => "inc",
            IdKind::Anomaly => "anm",
            IdKind::Checkout => "chk",
            IdKind::SsoConfig => "sso",
            IdKind::McpServer => "mcp",
        }
    }
}

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Creates a new identifier of `kind` whose time part is `now_ms` (Unix milliseconds).
///
/// Within one process identifiers are strictly increasing, even within one millisecond
/// (the last id is then incremented, as monotonic ULID generators do), so ordering by
/// `(timestamp, id)` follows the order of creation.
pub fn new_id(kind: IdKind, now_ms: i64) -> String {
    let mut random = [0u8; 10];
    rand::thread_rng().fill_bytes(&mut random);
    let mut value: u128 = (u128::from(now_ms.max(0) as u64) & ((1u128 << 48) - 1)) << 80;
    for (i, byte) in random.iter().enumerate() {
        value |= u128::from(*byte) << (8 * (9 - i));
    }
    value = monotonic(value);
    let mut out = String::with_capacity(kind.prefix().len() + 27);
    out.push_str(kind.prefix());
    out.push('_');
    for i in (0..26).rev() {
        let index = ((value >> (5 * i)) & 0x1f) as usize;
        out.push(char::from(CROCKFORD[index]));
    }
    out
}

fn monotonic(candidate: u128) -> u128 {
    static LAST: Mutex<u128> = Mutex::new(0);
    let Ok(mut last) = LAST.lock() else {
        return candidate;
    };
    // Never below the last id: when the clock stands still (or steps back) the id
    // continues from the last one instead of sorting before it.
    let value = if candidate <= *last {
        last.wrapping_add(1)
    } else {
        candidate
    };
    *last = value;
    value
}

/// Whether `candidate` has the shape of an identifier of `kind`.
///
/// Handlers use this to answer 404 for ids that cannot exist (wrong prefix, path
/// characters, over-long input) without asking the database.
pub fn is_valid_id(kind: IdKind, candidate: &str) -> bool {
    let Some(rest) = candidate
        .strip_prefix(kind.prefix())
        .and_then(|rest| rest.strip_prefix('_'))
    else {
        return false;
    };
    rest.len() == 26 && rest.bytes().all(|b| CROCKFORD.contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_valid_and_sort_by_time() {
        let earlier = new_id(IdKind::Agent, 1_700_000_000_000);
        let later = new_id(IdKind::Agent, 1_700_000_000_001);
        assert!(is_valid_id(IdKind::Agent, &earlier));
        assert!(earlier < later);
        let same: Vec<String> = (0..100).map(|_| new_id(IdKind::Agent, 5)).collect();
        assert!(same.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(earlier.starts_with("agt_"));
    }

    #[test]
    fn ids_of_other_kinds_or_with_path_characters_are_rejected() {
        let id = new_id(IdKind::Team, 1);
        assert!(!is_valid_id(IdKind::Agent, &id));
        assert!(!is_valid_id(IdKind::Team, "team_../../etc/passwd"));
        assert!(!is_valid_id(IdKind::Team, &format!("{id}x")));
        assert!(!is_valid_id(
            IdKind::Team,
            "team_01jd6z5q4t8w3n6xk2p9r7m1cv"
        ));
    }
}
