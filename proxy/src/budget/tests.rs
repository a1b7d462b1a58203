//! The counters' rules, one proxy's view (allowances: `allowance.rs`).
use super::*;

const MONTH: i64 = 1_000;
const TENANT: &str = "ten_1";

fn streamed(budgets: &Budgets, scope: &str, cost_micros: i64) {
    budgets.apply_ledger(
        &[ScopeSpend {
            tenant_id: TENANT.into(),
            scope: scope.into(),
            month: MONTH,
            cost_micros,
        }],
        FigureSource::Stream,
    );
}

fn rule(scope: &str, limit_micros: i64) -> BudgetRule {
    BudgetRule {
        scope: scope.into(),
        limit_micros,
        warn_pct: 80,
        block_pct: 100,
        source: RuleSource::Key,
    }
}

/// Reserves in `month` as a proxy whose control plane grants whatever is needed: the
/// rules of one proxy's own count.
fn reserve_in(
    budgets: &Budgets,
    rules: &[BudgetRule],
    estimate: i64,
    month: i64,
) -> Result<Admission, OverBudget> {
    loop {
        match budgets.reserve(TENANT, rules, estimate, month, NOW) {
            Ok(admission) => return Ok(admission),
            Err(Refused::Over(over)) => return Err(over),
            Err(Refused::Short(short)) => {
                let grants: Vec<(&str, i64)> = short
                    .iter()
                    .map(|s| (s.scope.as_str(), s.need_micros))
                    .collect();
                budgets.apply_grants(TENANT, month, &grants, NOW);
            }
        }
    }
}

fn reserve(
    budgets: &Budgets,
    rules: &[BudgetRule],
    estimate: i64,
) -> Result<Admission, OverBudget> {
    reserve_in(budgets, rules, estimate, MONTH)
}

const NOW: i64 = 5_000;

#[test]
fn reservations_share_the_headroom_and_release_when_dropped() {
    let budgets = Budgets::default();
    streamed(&budgets, "key:ak_1", 600);
    let key = [rule("key:ak_1", 1_000)];
    let first = reserve(&budgets, &key, 300).unwrap();
    let refused = reserve(&budgets, &key, 300).err().unwrap();
    assert_eq!(refused.spent_micros, 900);
    drop(first);
    assert!(reserve(&budgets, &key, 300).is_ok());
}

#[test]
fn settled_cost_counts_once_until_and_after_the_ledger_has_it() {
    let budgets = Budgets::default();
    streamed(&budgets, "key:ak_1", 100);
    let key = [rule("key:ak_1", 1_000)];
    let hold = reserve(&budgets, &key, 500)
        .unwrap()
        .reservation
        .settle(700)
        .unwrap();
    // Pending: 800 of 1,000 spent, so a 300 estimate no longer fits.
    let over = reserve(&budgets, &key, 300).err().unwrap();
    assert_eq!(over.spent_micros, 800);
    // Acknowledged with the ledger's new figure: still 800, not 1,500.
    streamed(&budgets, "key:ak_1", 800);
    hold.release();
    let over = reserve(&budgets, &key, 300).err().unwrap();
    assert_eq!(over.spent_micros, 800);
    // A stale figure arriving late changes nothing.
    streamed(&budgets, "key:ak_1", 100);
    assert!(reserve(&budgets, &key, 200).is_ok());
}

#[test]
fn a_figure_streamed_while_a_batch_is_sent_waits_for_its_acknowledgement() {
    let budgets = Budgets::default();
    streamed(&budgets, "key:ak_1", 100);
    let key = [rule("key:ak_1", 1_000)];
    let mut hold = reserve(&budgets, &key, 400)
        .unwrap()
        .reservation
        .settle(300)
        .unwrap();
    hold.sending();
    // The batch committed (100 + 300) and the stream told us before the ack did.
    streamed(&budgets, "key:ak_1", 400);
    assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 400);
    budgets.apply_ledger(
        &[ScopeSpend {
            tenant_id: TENANT.into(),
            scope: "key:ak_1".into(),
            month: MONTH,
            cost_micros: 400,
        }],
        FigureSource::Acknowledgement,
    );
    hold.release();
    assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 400);
    // Another proxy's spend, streamed while a batch was out, is taken after its ack.
    let mut hold = reserve(&budgets, &key, 100)
        .unwrap()
        .reservation
        .settle(50)
        .unwrap();
    hold.sending();
    streamed(&budgets, "key:ak_1", 700);
    assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 450);
    hold.release();
    assert_eq!(budgets.spent(TENANT, "key:ak_1", MONTH), 700);
}

#[test]
fn a_request_must_fit_every_budget_and_holds_each() {
    let budgets = Budgets::default();
    streamed(&budgets, "tenant", 500);
    let mut team = rule("team:tm_1", 10_000);
    team.source = RuleSource::Limit("bud_1".into());
    let rules = [rule("tenant", 1_000), team.clone()];
    let admitted = reserve(&budgets, &rules, 350).unwrap();
    // 850 of the tenant's 1,000: past its 80 % warning, not the team's.
    assert_eq!(admitted.warnings.len(), 1);
    assert_eq!(admitted.warnings[0].scope, "tenant");
    assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 350);
    let over = reserve(&budgets, &rules, 200).err().unwrap();
    assert_eq!(over.scope, "tenant");
    // Refused whole: the team's budget kept nothing of it.
    assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 350);
    drop(admitted);
    assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 0);
    // Two rules on one scope hold it once.
    let twice = [team.clone(), team];
    let _held = reserve(&budgets, &twice, 100).unwrap();
    assert_eq!(budgets.spent(TENANT, "team:tm_1", MONTH), 100);
}

#[test]
fn a_new_month_starts_from_nothing() {
    let budgets = Budgets::default();
    streamed(&budgets, "key:ak_1", 5_000);
    let key = [rule("key:ak_1", 1_000)];
    assert!(reserve(&budgets, &key, 1).is_err());
    assert!(reserve_in(&budgets, &key, 1, MONTH + 1).is_ok());
}

#[test]
fn estimates_price_body_and_max_tokens() {
    let price =
        warden_shared::pricing::find_price(warden_shared::registry::Provider::Openai, "gpt-4o")
            .unwrap();
    let small = estimate_micros(Some(price), 400, Some(10));
    let large = estimate_micros(Some(price), 400, Some(10_000));
    assert!(small > 0 && large > small);
    assert_eq!(
        estimate_micros(Some(price), 400, None),
        estimate_micros(Some(price), 400, Some(DEFAULT_OUTPUT_TOKENS))
    );
    assert_eq!(
        estimate_micros(Some(price), 400, Some(i64::MAX)),
        estimate_micros(Some(price), 400, Some(MAX_OUTPUT_TOKENS))
    );
    assert_eq!(estimate_micros(None, 400, Some(10)), 0);
}

#[test]
fn a_request_fits_the_allowance_or_names_what_it_needs() {
    let budgets = Budgets::default();
    let mut tenant = rule("tenant", 10_000);
    tenant.block_pct = 50;
    let rules = [
        rule("tenant", 10_000),
        tenant,
        rule("agent:ag_1", 1_000_000),
    ];
    let Err(Refused::Short(short)) = budgets.reserve(TENANT, &rules, 400, MONTH, NOW) else {
        panic!("reserved without an allowance");
    };
    // One shortfall per scope, against its lowest block threshold.
    assert_eq!(short.len(), 2);
    assert_eq!(short[1].scope, "tenant");
    assert_eq!((short[1].block_micros, short[1].need_micros), (5_000, 400));
    // Granted less than it needs in one scope: still short there, and only there.
    budgets.apply_grants(
        TENANT,
        MONTH,
        &[("tenant", 1_000), ("agent:ag_1", 300)],
        NOW,
    );
    let Err(Refused::Short(short)) = budgets.reserve(TENANT, &rules, 400, MONTH, NOW) else {
        panic!("reserved past the agent's allowance");
    };
    assert_eq!((short.len(), short[0].need_micros), (1, 100));
    budgets.apply_grants(TENANT, MONTH, &[("agent:ag_1", 100)], NOW);
    let admitted = budgets
        .reserve(TENANT, &rules, 400, MONTH, NOW)
        .ok()
        .unwrap();
    // In flight, then acknowledged: what the ledger has goes back with the next ask.
    let hold = admitted.reservation.settle(350).unwrap();
    assert_eq!(budgets.held().granted_micros, 1_400);
    hold.release();
    assert_eq!(budgets.held().granted_micros, 700);
    let Err(Refused::Short(short)) = budgets.reserve(TENANT, &rules, 700, MONTH, NOW) else {
        panic!("reserved past the allowance");
    };
    let releases: Vec<i64> = short
        .iter()
        .map(|s| budgets.take_release(TENANT, &s.scope, NOW))
        .collect();
    assert_eq!(releases, [350, 350]);
    // Taken once: a second ask carries nothing more.
    assert_eq!(budgets.take_release(TENANT, &short[0].scope, NOW), 0);
}

#[test]
fn a_scope_counted_alone_needs_no_allowance() {
    let budgets = Budgets::default();
    let key = [rule("key:ak_1", 1_000)];
    budgets.count_alone(TENANT, &["key:ak_1"], NOW);
    let _admitted = budgets.reserve(TENANT, &key, 900, MONTH, NOW).ok().unwrap();
    // By its own count still: no more than the threshold.
    assert!(matches!(
        budgets.reserve(TENANT, &key, 200, MONTH, NOW),
        Err(Refused::Over(_))
    ));
}
