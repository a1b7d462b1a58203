//! A prompt on its span: only when the operator asks for content and the tenant's payload
//! capture is on, and then redacted by the tenant's rules.

use serde_json::{json, Value};

use super::{trace_id, Traced};
use crate::otlp::{Collector, ReceivedSpan};
use crate::proxy::capture::capture_redacting_mail;

/// Turns the tenant's payload capture on, with a rule that redacts mail addresses in
/// chat and Messages API content.
async fn enable_capture(traced: &Traced) {
    let (app, key) = (&traced.app, &traced.tenant.admin_key);
    capture_redacting_mail(app, key, "messages.content").await;
}

fn json_attr(span: &ReceivedSpan, name: &str) -> Value {
    serde_json::from_str(span.str(name)).unwrap()
}

const CONTENT_ATTRIBUTES: [&str; 4] = [
    "gen_ai.input.messages",
    "gen_ai.system_instructions",
    "warden.content.redactions",
    "warden.content.omitted",
];

fn has_no_content(span: &ReceivedSpan) {
    for name in CONTENT_ATTRIBUTES {
        assert!(span.attr(name).is_none(), "{name} on {span:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_on_spans_only_when_asked_for_and_captured_and_redacted() {
    let traced = Traced::start_with(Collector::tracer_with_content).await;
    let secret_mail = "alice.secret@example.com";
    let chat = json!({
        "model": "gpt-4o-mini",
        "messages": [
            { "role": "system", "content": "You answer support mail." },
            { "role": "user", "content": format!("Write to {secret_mail} today") },
        ],
    });

    // The operator asked for content, but the tenant captures no payloads: none.
    has_no_content(
        &traced
            .call(
                "/v1/chat/completions",
                &trace_id(1),
                chat.clone(),
                "chat gpt-4o-mini",
            )
            .await,
    );

    // With capture on, the prompt is on the span, redacted by the tenant's rules.
    enable_capture(&traced).await;
    let client = traced
        .call(
            "/v1/chat/completions",
            &trace_id(2),
            chat.clone(),
            "chat gpt-4o-mini",
        )
        .await;
    assert_eq!(
        json_attr(&client, "gen_ai.input.messages"),
        json!([
            { "role": "system", "parts": [{ "type": "text", "content": "You answer support mail." }] },
            { "role": "user", "parts": [{ "type": "text", "content": "Write to [REDACTED:email] today" }] },
        ])
    );
    assert_eq!(client.int("warden.content.redactions"), 1);
    assert!(client.attr("gen_ai.system_instructions").is_none());
    assert!(
        !format!("{client:?}").contains("alice.secret"),
        "the address is on no attribute"
    );
    // Answers are not payloads the tenant captures: no completion on the span.
    assert!(client.attr("gen_ai.output.messages").is_none());

    // The Messages API's system prompt is apart from its messages, as in the conventions.
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.",
        "messages": [{ "role": "user", "content": [
            { "type": "text", "text": format!("Mail {secret_mail}") }
        ] }],
    });
    let client = traced
        .call("/v1/messages", &trace_id(3), body, "chat claude-sonnet-4-5")
        .await;
    assert_eq!(
        json_attr(&client, "gen_ai.system_instructions"),
        json!([{ "type": "text", "content": "Be brief." }])
    );
    // Redacted inside the API's content blocks too.
    assert_eq!(
        json_attr(&client, "gen_ai.input.messages"),
        json!([{ "role": "user", "parts": [{ "type": "text", "content": "Mail [REDACTED:email]" }] }])
    );

    // The conventions have no input for embeddings: nothing is exported for them.
    let body = json!({ "model": "text-embedding-3-small", "input": "hello" });
    has_no_content(
        &traced
            .call(
                "/v1/embeddings",
                &trace_id(4),
                body,
                "embeddings text-embedding-3-small",
            )
            .await,
    );

    // An operator who did not ask for content gets none, whatever the tenant captures.
    let plain = Traced::start().await;
    enable_capture(&plain).await;
    has_no_content(
        &plain
            .call(
                "/v1/chat/completions",
                &trace_id(5),
                chat,
                "chat gpt-4o-mini",
            )
            .await,
    );
}
