//! Every way a forwarded request can end, and what it is charged (`proxy/README.md`,
//! "What a request is charged"): the ledger holds exactly that, and no budget
//! reservation outlives its request.

use std::time::Duration;

use serde_json::{json, Value};

use super::mock::{COMPLETION_TOKENS, PROMPT_TOKENS};
use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{expect_status, metric, TestApp};
use crate::servers::RefusingPort;

/// What the ledger must hold for one request.
#[derive(Debug, Clone, Copy)]
enum Charged {
    /// No usage record: the provider never answered (unreachable, no answer in time).
    Nothing,
    /// A record of a request with no tokens: the provider answered with an error.
    NoTokens,
    /// The provider's own usage.
    Reported,
    /// Estimated: the request body's bytes / 4 in; `output` the text relayed / 4, or
    /// `None` when it depends on how far a stream got (then at least one token).
    Estimated { output: Option<i64> },
}

/// How the client behaves.
#[derive(Debug, Clone, Copy)]
enum Client {
    /// Reads the whole answer.
    Reads,
    /// Hangs up 300 ms after sending, before any answer.
    HangsUpEarly,
    /// Reads the first streamed token, then hangs up.
    HangsUpMidStream,
}

struct Case {
    name: &'static str,
    /// The mock's behaviour (`user` field), if any.
    behaviour: Option<&'static str>,
    stream: bool,
    client: Client,
    status: Option<u16>,
    charged: Charged,
}

const fn case(
    name: &'static str,
    behaviour: Option<&'static str>,
    stream: bool,
    client: Client,
    status: Option<u16>,
    charged: Charged,
) -> Case {
    Case {
        name,
        behaviour,
        stream,
        client,
        status,
        charged,
    }
}

/// "Hello from the mock": 19 characters, 5 tokens by the estimate.
const CUT_STREAM_OUTPUT: i64 = 5;

const THROUGH_THE_MOCK: &[Case] = &[
    case(
        "completed",
        None,
        false,
        Client::Reads,
        Some(200),
        Charged::Reported,
    ),
    case(
        "completed stream",
        None,
        true,
        Client::Reads,
        Some(200),
        Charged::Reported,
    ),
    case(
        "provider 400",
        Some("mock-status-400"),
        false,
        Client::Reads,
        Some(400),
        Charged::NoTokens,
    ),
    case(
        "provider 400 streamed",
        Some("mock-status-400"),
        true,
        Client::Reads,
        Some(400),
        Charged::NoTokens,
    ),
    case(
        "provider 429",
        Some("mock-status-429"),
        false,
        Client::Reads,
        Some(429),
        Charged::NoTokens,
    ),
    case(
        "provider 429 streamed",
        Some("mock-status-429"),
        true,
        Client::Reads,
        Some(429),
        Charged::NoTokens,
    ),
    case(
        "provider 500",
        Some("mock-status-500"),
        false,
        Client::Reads,
        Some(500),
        Charged::NoTokens,
    ),
    case(
        "provider 500 streamed",
        Some("mock-status-500"),
        true,
        Client::Reads,
        Some(500),
        Charged::NoTokens,
    ),
    case(
        "provider 503 streamed",
        Some("mock-status-503"),
        true,
        Client::Reads,
        Some(503),
        Charged::NoTokens,
    ),
    case(
        "stream cut after some tokens",
        Some("mock-cut-stream"),
        true,
        Client::Reads,
        Some(200),
        Charged::Estimated {
            output: Some(CUT_STREAM_OUTPUT),
        },
    ),
    case(
        "client abort before the answer",
        Some("mock-hang"),
        false,
        Client::HangsUpEarly,
        None,
        Charged::Estimated { output: Some(0) },
    ),
    case(
        "client abort before the streamed answer",
        Some("mock-hang"),
        true,
        Client::HangsUpEarly,
        None,
        Charged::Estimated { output: Some(0) },
    ),
    case(
        "client abort mid-stream",
        Some("mock-slow-stream"),
        true,
        Client::HangsUpMidStream,
        Some(200),
        Charged::Estimated { output: None },
    ),
];

fn body_of(case: &Case) -> Value {
    let mut body = simple_chat("gpt-4o-mini");
    if let Some(behaviour) = case.behaviour {
        body["user"] = json!(behaviour);
    }
    if case.stream {
        body["stream"] = json!(true);
    }
    body
}

/// Sends `case` through `proxy` with `key`, behaving as its client does; the status the
/// client saw, if it waited for one.
async fn run(proxy: &TestProxy, key: &str, case: &Case) -> Option<u16> {
    let request = proxy
        .client
        .post(format!("{}/v1/chat/completions", proxy.base))
        .bearer_auth(key)
        .json(&body_of(case));
    match case.client {
        Client::Reads => {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let _ = response.bytes().await;
            Some(status)
        }
        Client::HangsUpEarly => {
            let sent = request.timeout(Duration::from_millis(300)).send().await;
            assert!(sent.is_err_and(|e| e.is_timeout()), "{}", case.name);
            None
        }
        Client::HangsUpMidStream => {
            let mut response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let chunk = response.chunk().await.unwrap().unwrap();
            assert!(!chunk.is_empty());
            drop(response);
            Some(status)
        }
    }
}

/// Estimated input tokens of `body` as the agent sent it (four bytes a token).
fn estimated_input(body: &Value) -> i64 {
    let bytes = serde_json::to_vec(body).unwrap().len();
    i64::try_from(bytes.div_ceil(4)).unwrap()
}

/// Waits until the tenant's ledger holds `requests` records; its summary then.
async fn summary_with(app: &TestApp, admin: &str, requests: i64) -> Value {
    eventually(Duration::from_secs(10), || async {
        let body = expect_status(app.get("/cost/summary", admin).await, 200).await;
        (body["data"]["total_requests"] == json!(requests)).then_some(body["data"].clone())
    })
    .await
}

/// Runs `case` for a tenant of its own, followed by one completed request (so a case
/// that leaves no record is known to be flushed), and checks the ledger.
async fn check(app: &TestApp, proxy: &TestProxy, marker: &TestProxy, case: &Case) {
    let (tenant, key, _) = proxy
        .tenant_with_key(
            app,
            json!({ "developer_label": case.name, "budget_limit_usd": 5 }),
        )
        .await;
    let status = run(proxy, &key, case).await;
    assert_eq!(status, case.status, "{}", case.name);
    let (marker_status, _) = marker.chat_answer(&key, "gpt-4o-mini").await;
    assert_eq!(marker_status, 200, "{}", case.name);
    let (requests, input, output) = match case.charged {
        Charged::Nothing => (1, 0, 0),
        Charged::NoTokens => (2, 0, 0),
        Charged::Reported => (2, PROMPT_TOKENS, COMPLETION_TOKENS),
        Charged::Estimated { output } => (2, estimated_input(&body_of(case)), output.unwrap_or(-1)),
    };
    let summary = summary_with(app, &tenant.admin_key, requests).await;
    let case_input = summary["total_input_tokens"].as_i64().unwrap() - PROMPT_TOKENS;
    let case_output = summary["total_output_tokens"].as_i64().unwrap() - COMPLETION_TOKENS;
    assert_eq!(case_input, input, "{}: input tokens", case.name);
    if output >= 0 {
        assert_eq!(case_output, output, "{}: output tokens", case.name);
    } else {
        assert!(
            case_output >= 1,
            "{}: output tokens {case_output}",
            case.name
        );
    }
}

/// Once idle, `proxy` holds no reservation and nothing pending.
async fn settled(proxy: &TestProxy) {
    eventually(Duration::from_secs(10), || async {
        let metrics = proxy.metrics().await;
        let reserved = metric(&metrics, "warden_proxy_budget_reserved_microdollars");
        let pending = metric(&metrics, "warden_proxy_budget_pending_microdollars");
        (reserved == Some(0.0) && pending == Some(0.0)).then_some(())
    })
    .await;
}

db_test!(
    every_exit_path_is_settled_and_charged_as_documented,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        for case in THROUGH_THE_MOCK {
            check(&app, &proxy, &proxy, case).await;
        }

        // A provider that answers nothing in time: 504, and no record.
        let impatient = TestProxy::start_with(&app, &provider, |config| {
            config.first_byte_timeout_ms = 300;
        })
        .await;
        for stream in [false, true] {
            let timeout = case(
                "first-byte timeout",
                Some("mock-hang"),
                stream,
                Client::Reads,
                Some(504),
                Charged::Nothing,
            );
            check(&app, &impatient, &proxy, &timeout).await;
        }

        // A provider that drops the connection without answering, and one nobody serves:
        // 502, and no record.
        let dropping = MockProvider::elsewhere(dropping_provider().await);
        let refusing = RefusingPort::new();
        let closed = MockProvider::elsewhere(format!("127.0.0.1:{}", refusing.port));
        for (name, upstream) in [("connection dropped", &dropping), ("unreachable", &closed)] {
            let broken = TestProxy::start(&app, upstream).await;
            for stream in [false, true] {
                let failed = case(
                    name,
                    None,
                    stream,
                    Client::Reads,
                    Some(502),
                    Charged::Nothing,
                );
                check(&app, &broken, &proxy, &failed).await;
            }
            settled(&broken).await;
        }
        settled(&impatient).await;
        settled(&proxy).await;
    }
);

db_test!(
    half_of_64_concurrent_streams_aborted_are_each_settled_once,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, key, _) = proxy
            .tenant_with_key(
                &app,
                json!({ "developer_label": "fan-out", "budget_limit_usd": 50 }),
            )
            .await;
        let reads = case(
            "stream",
            Some("mock-slow-stream"),
            true,
            Client::Reads,
            Some(200),
            Charged::Reported,
        );
        let aborts = case(
            "aborted stream",
            Some("mock-slow-stream"),
            true,
            Client::HangsUpMidStream,
            Some(200),
            Charged::Estimated { output: None },
        );
        let streams = (0..64).map(|i| {
            let (proxy, key) = (&proxy, key.as_str());
            let case = if i % 2 == 0 { &reads } else { &aborts };
            async move { run(proxy, key, case).await }
        });
        let statuses = futures_util::future::join_all(streams).await;
        assert!(
            statuses.iter().all(|status| *status == Some(200)),
            "{statuses:?}"
        );
        let summary = summary_with(&app, &tenant.admin_key, 64).await;
        let estimate = estimated_input(&body_of(&aborts));
        assert_eq!(
            summary["total_input_tokens"],
            json!(32 * PROMPT_TOKENS + 32 * estimate)
        );
        let output = summary["total_output_tokens"].as_i64().unwrap();
        assert!(output >= 32 * COMPLETION_TOKENS + 32, "{output}");
        settled(&proxy).await;
    }
);

/// A provider that reads each request and closes the connection without an answer.
async fn dropping_provider() -> std::net::SocketAddr {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buffer).await;
            });
        }
    });
    address
}
