//! A scope's allowance: the money the control plane granted this proxy in a budget
//! scope for the month (`POST /internal/v1/budget-grants`, see `crate::budget_grants`).
//! A request is admitted only when what this proxy has not yet had acknowledged by the
//! ledger (its requests in flight and its finished ones still pending), with the
//! request's estimate, fits in the allowance; the control plane grants only while the
//! ledger's spend plus every proxy's allowance stays within the block threshold, so
//! N proxies together keep the bound one proxy has (see `super`).
//!
//! What this proxy believes it holds is never more than the control plane counts for
//! it: a grant is added here only once the control plane has added it, and money given
//! back (the ledger acknowledged it, or it lay unused) leaves here first and is told to
//! the control plane with the next request. A request whose answer is lost leaves the
//! control plane counting more, never less, until the holding lapses there
//! ([`RELY_FOR_MS`] here is well within the control plane's minute).

/// How long after a request that renewed it an allowance is relied on: the control
/// plane forgets a holding not renewed for 60 s; the rest is margin for clocks and
/// transit.
pub const RELY_FOR_MS: i64 = 40_000;
/// An allowance in use is renewed when less than this is left of its time.
pub const RENEW_WITHIN_MS: i64 = 20_000;
/// An allowance's unused part is given back after this long without a request.
pub const IDLE_MS: i64 = 5_000;
/// How long a scope is counted by this proxy alone after the control plane did not
/// answer for it.
pub const ALONE_FOR_MS: i64 = 10_000;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Allowance {
    /// Granted for the month, less what was given back.
    held: i64,
    /// Until when `held` is relied on.
    rely_until: i64,
    /// Given back here and not yet told to the control plane.
    to_release: i64,
    /// Until when the scope is counted by this proxy alone.
    alone_until: i64,
    /// When a request last reserved in the scope.
    last_used: i64,
    /// The block threshold the scope was last checked against (for renewals).
    block_micros: i64,
    /// How many answers to asks (a grant, or none: counted alone) have come: a request
    /// found short asks only when none came since it looked.
    answers: u64,
}

/// What a renewal round tells the control plane about one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    pub block_micros: i64,
    pub release_micros: i64,
}

impl Allowance {
    /// How much more than it holds this proxy needs for a request of `estimate` while
    /// `unacknowledged` (in flight and pending) is out; 0 when it fits or when the scope
    /// is counted alone.
    pub fn shortfall(&self, unacknowledged: i64, estimate: i64, now: i64) -> i64 {
        if now < self.alone_until {
            return 0;
        }
        (unacknowledged + estimate - self.usable(now)).max(0)
    }

    fn usable(&self, now: i64) -> i64 {
        if now < self.rely_until {
            self.held
        } else {
            0
        }
    }

    /// A request reserved in the scope against `block_micros`.
    pub fn used(&mut self, block_micros: i64, now: i64) {
        self.last_used = now;
        self.block_micros = block_micros;
    }

    /// What goes back with a request for the scope sent now: what was given back here,
    /// and all of the allowance once it is no longer relied on. Taken: sent once, and a
    /// lost answer leaves the control plane counting more, not less.
    pub fn take_release(&mut self, now: i64) -> i64 {
        if self.held > 0 && now >= self.rely_until {
            self.to_release += std::mem::take(&mut self.held);
        }
        std::mem::take(&mut self.to_release)
    }

    /// The control plane granted `granted` in answer to a request sent at `sent_at`.
    pub fn granted(&mut self, granted: i64, sent_at: i64) {
        self.answers += 1;
        self.held += granted;
        if self.held > 0 {
            self.rely_until = self.rely_until.max(sent_at + RELY_FOR_MS);
        }
    }

    /// The control plane did not answer: count the scope alone for a while.
    pub fn alone(&mut self, now: i64) {
        self.answers += 1;
        self.alone_until = now + ALONE_FOR_MS;
    }

    /// The ledger acknowledged `cost` of this scope: it leaves the allowance here now
    /// and there with the next request.
    pub fn acknowledged(&mut self, cost: i64) {
        let back = cost.min(self.held).max(0);
        self.held -= back;
        self.to_release += back;
    }

    /// What a renewal round sends for the scope, if anything: money to give back (what
    /// lay unused for [`IDLE_MS`], all of it once it is no longer relied on) and a
    /// renewal of an allowance in use whose time runs out.
    pub fn renewal(&mut self, unacknowledged: i64, now: i64) -> Option<Renewal> {
        if self.held > 0 && now >= self.rely_until {
            self.to_release += std::mem::take(&mut self.held);
        }
        let spare = self.held - unacknowledged;
        if spare > 0 && now - self.last_used >= IDLE_MS {
            self.held -= spare;
            self.to_release += spare;
        }
        let expiring = self.held > 0 && self.rely_until - now < RENEW_WITHIN_MS;
        if self.to_release == 0 && !expiring {
            return None;
        }
        Some(Renewal {
            block_micros: self.block_micros,
            release_micros: self.take_release(now),
        })
    }

    /// A renewal sent at `sent_at` was answered: the allowance is relied on longer.
    pub fn renewed(&mut self, sent_at: i64) {
        if self.held > 0 {
            self.rely_until = self.rely_until.max(sent_at + RELY_FOR_MS);
        }
    }

    /// The allowance of a new month: nothing held yet; counted alone as before (that is
    /// about the control planes, not the month).
    pub fn next_month(&self) -> Allowance {
        Allowance {
            alone_until: self.alone_until,
            answers: self.answers + 1,
            ..Allowance::default()
        }
    }

    pub fn held(&self) -> i64 {
        self.held
    }

    pub fn answers(&self) -> u64 {
        self.answers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_what_it_and_the_unacknowledged_do_not_fit_in() {
        let mut allowance = Allowance::default();
        assert_eq!(allowance.shortfall(0, 100, 0), 100);
        allowance.granted(500, 0);
        assert_eq!(allowance.shortfall(300, 100, 1), 0);
        assert_eq!(allowance.shortfall(450, 100, 1), 50);
        // Not relied on once its time is out: the whole need is asked again.
        assert_eq!(allowance.shortfall(0, 100, RELY_FOR_MS), 100);
        // Counted alone while the control plane does not answer.
        allowance.alone(RELY_FOR_MS);
        assert_eq!(allowance.shortfall(0, 100, RELY_FOR_MS + 1), 0);
        assert_eq!(allowance.shortfall(0, 100, RELY_FOR_MS + ALONE_FOR_MS), 100);
    }

    #[test]
    fn acknowledged_money_leaves_here_first_and_goes_back_once() {
        let mut allowance = Allowance::default();
        allowance.granted(1_000, 0);
        allowance.used(5_000, 0);
        allowance.acknowledged(300);
        assert_eq!(allowance.held(), 700);
        assert_eq!(allowance.take_release(1), 300);
        assert_eq!(allowance.take_release(1), 0);
        // Never more than held goes back (a request admitted alone cost more).
        allowance.acknowledged(2_000);
        assert_eq!((allowance.held(), allowance.take_release(1)), (0, 700));
    }

    #[test]
    fn renewals_give_back_what_lies_unused_and_renew_what_is_in_use() {
        let mut allowance = Allowance::default();
        allowance.granted(1_000, 0);
        allowance.used(5_000, 0);
        // In use and far from running out: nothing to say.
        assert_eq!(allowance.renewal(400, 1_000), None);
        // Idle: the part not covering unacknowledged money goes back.
        let renewal = allowance.renewal(400, IDLE_MS).unwrap();
        assert_eq!(renewal.release_micros, 600);
        assert_eq!(renewal.block_micros, 5_000);
        assert_eq!(allowance.held(), 400);
        // Running out while still covering money out: renewed, nothing released.
        let late = RELY_FOR_MS - RENEW_WITHIN_MS + 1;
        assert_eq!(allowance.renewal(400, late).unwrap().release_micros, 0);
        allowance.renewed(late);
        assert_eq!(allowance.shortfall(400, 0, RELY_FOR_MS + 1), 0);
        // Not renewed in time: all of it goes back and nothing is relied on.
        let gone = late + RELY_FOR_MS;
        assert_eq!(allowance.renewal(400, gone).unwrap().release_micros, 400);
        assert_eq!(allowance.held(), 0);
    }

    #[test]
    fn an_allowance_no_longer_relied_on_goes_back_whole_with_the_next_request() {
        let mut allowance = Allowance::default();
        allowance.granted(1_000, 0);
        let later = RELY_FOR_MS + 5;
        assert_eq!(allowance.take_release(later), 1_000);
        allowance.granted(200, later);
        assert_eq!(allowance.held(), 200);
        assert_eq!(allowance.shortfall(200, 0, later + 1), 0);
    }
}
