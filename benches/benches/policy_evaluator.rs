//! The policy evaluator (`warden_shared::policy::evaluate`) with 1, 10 and 100 enabled
//! policies, as the proxy calls it on every request. Target: under 2 µs per request at
//! 100 policies. Run with `cargo bench -p warden-benches --bench policy_evaluator`;
//! after criterion's own report it prints each size as a ratio to the 1-policy run.
//!
//! The policies cycle through all six types and four scopes (about half of them cover
//! the request), so the figures include both checked and skipped policies.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion};
use serde_json::json;
use warden_shared::policy::{
    evaluate, sort_for_evaluation, Counters, Policy, PolicyType, RatePer, RequestFacts, Scope,
};
use warden_shared::registry::Provider;
use warden_shared::snapshot::PolicyState;

const SIZES: [usize; 3] = [1, 10, 100];

/// Counters as cheap as the proxy's memory reads: fixed figures.
struct Fixed;

impl Counters for Fixed {
    fn month_spend_micros(&self, _: &Scope) -> i64 {
        1_000_000
    }
    fn minute_counts(&self, _: i64, _: RatePer) -> (i64, i64) {
        (3, 1_200)
    }
    fn approval_granted(&self, _: i64) -> bool {
        false
    }
}

#[expect(
    clippy::panic,
    reason = "a policy the shared crate refuses makes the benchmark meaningless: stop loudly"
)]
fn policy(index: usize) -> Policy {
    let scope = match index % 4 {
        0 => "global".to_owned(),
        1 => "team:team_1".to_owned(),
        2 => format!("agent:agt_{}", index % 7),
        _ => "environment:production".to_owned(),
    };
    let (policy_type, config) = match index % 6 {
        0 => (
            PolicyType::ModelAllowlist,
            json!({ "allowed_models": ["gpt-4o", "gpt-4o-mini", "claude-*", "o3*"] }),
        ),
        1 => (
            PolicyType::BlockProvider,
            json!({ "providers": ["nvidia"] }),
        ),
        2 => (
            PolicyType::RequireApproval,
            json!({ "models": ["o1-pro"], "environments": ["production"] }),
        ),
        3 => (
            PolicyType::BudgetLimit,
            json!({ "monthly_limit_usd": 5_000 }),
        ),
        4 => (
            PolicyType::RateLimit,
            json!({ "requests_per_minute": 600, "tokens_per_minute": 1_000_000, "per": "agent" }),
        ),
        _ => (
            PolicyType::RequireHumanReview,
            json!({ "providers": ["anthropic"] }),
        ),
    };
    // A budget or rate limit on an environment scope is refused by the control plane.
    let scope =
        if matches!(policy_type, PolicyType::BudgetLimit) && scope.starts_with("environment") {
            "global".to_owned()
        } else {
            scope
        };
    Policy::from_state(&PolicyState {
        id: index as i64 + 1,
        tenant_id: "ten_1".into(),
        name: format!("policy {index}"),
        policy_type,
        scope,
        priority: (index % 5) as i64,
        config,
    })
    .unwrap_or_else(|error| panic!("policy {index}: {}", error.message))
}

fn policies(count: usize) -> Vec<Policy> {
    let mut policies: Vec<Policy> = (0..count).map(policy).collect();
    sort_for_evaluation(&mut policies);
    policies
}

fn request() -> RequestFacts<'static> {
    RequestFacts {
        tenant_id: "ten_1",
        agent_id: "agt_3",
        team_id: Some("team_1"),
        environment: "production",
        api_key_id: Some("key_1"),
        provider: Provider::Openai,
        model: "gpt-4o",
        estimated_cost_micros: 1_500,
    }
}

fn bench_evaluator(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluate");
    for size in SIZES {
        let policies = policies(size);
        group.bench_with_input(
            BenchmarkId::from_parameter(size),
            &policies,
            |b, policies| b.iter(|| evaluate(black_box(policies), black_box(&request()), &Fixed)),
        );
    }
    group.finish();
}

criterion_group!(benches, bench_evaluator);

/// Mean time per evaluation over about `budget` of repetitions.
fn mean_per_request(policies: &[Policy], budget: Duration) -> Duration {
    let mut runs: u32 = 0;
    let started = Instant::now();
    while started.elapsed() < budget {
        for _ in 0..1_000 {
            black_box(evaluate(black_box(policies), black_box(&request()), &Fixed));
        }
        runs += 1_000;
    }
    started.elapsed() / runs
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // The same sizes once more, measured side by side, as ratios to one policy.
    let baseline = mean_per_request(&policies(1), Duration::from_secs(1));
    println!("\nper request (mean over 1 s each), ratio to 1 policy:");
    for size in SIZES {
        let mean = mean_per_request(&policies(size), Duration::from_secs(1));
        let ratio = mean.as_secs_f64() / baseline.as_secs_f64();
        let verdict = if size == 100 {
            if mean < Duration::from_micros(2) {
                "  (target < 2 µs: met)"
            } else {
                "  (target < 2 µs: MISSED)"
            }
        } else {
            ""
        };
        println!(
            "  {size:>3} policies: {:>8.0} ns  {ratio:>6.1}x{verdict}",
            mean.as_nanos()
        );
    }
}
