//! A real OpenAI client library against the proxy: plain and streamed completions and
//! embeddings, the provider credential swapped in, usage landing in the ledger.

use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::types::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
    CreateEmbeddingRequestArgs,
};
use async_openai::Client;
use futures_util::StreamExt;
use serde_json::json;

use super::mock::{COMPLETION_TOKENS, PROMPT_TOKENS};
use super::{eventually, MockProvider, TestProxy, UPSTREAM_KEY};
use crate::helpers::expect_status;

db_test!(
    an_openai_client_gets_answers_and_its_usage_reaches_the_ledger,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "sdk" }))
            .await;
        let agent_id = created["agent_id"].as_str().unwrap().to_owned();
        let client = Client::with_config(
            OpenAIConfig::new()
                .with_api_base(format!("{}/v1", proxy.base))
                .with_api_key(&raw_key),
        );
        let message = ChatCompletionRequestUserMessageArgs::default()
            .content("Say hello")
            .build()
            .unwrap();

        // A plain completion.
        let request = CreateChatCompletionRequestArgs::default()
            .model("gpt-4o-mini")
            .messages(vec![message.clone().into()])
            .build()
            .unwrap();
        let answer = client.chat().create(request).await.unwrap();
        assert_eq!(
            answer.choices[0].message.content.as_deref(),
            Some("Hello from the mock")
        );
        let seen = provider.last();
        assert_eq!(
            seen.headers["authorization"],
            format!("Bearer {UPSTREAM_KEY}")
        );
        assert!(
            !format!("{:?}", seen.headers).contains(&raw_key),
            "the proxy key leaked upstream"
        );

        // A streamed completion: the proxy asks for usage, and the client, which did not,
        // gets no usage chunk.
        let request = CreateChatCompletionRequestArgs::default()
            .model("gpt-4o-mini")
            .messages(vec![message.into()])
            .stream(true)
            .build()
            .unwrap();
        let mut stream = client.chat().create_stream(request).await.unwrap();
        let mut text = String::new();
        let mut chunks = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            chunks += 1;
            assert!(
                chunk.usage.is_none(),
                "the injected usage chunk reached the client"
            );
            for choice in chunk.choices {
                text.push_str(choice.delta.content.as_deref().unwrap_or_default());
            }
        }
        assert_eq!(text, "Hello from the mock");
        assert_eq!(chunks, 3);
        let upstream: serde_json::Value = serde_json::from_slice(&provider.last().body).unwrap();
        assert_eq!(upstream["stream_options"]["include_usage"], json!(true));

        // Embeddings.
        let request = CreateEmbeddingRequestArgs::default()
            .model("text-embedding-3-small")
            .input("a sentence")
            .build()
            .unwrap();
        let embedding = client.embeddings().create(request).await.unwrap();
        assert_eq!(embedding.data[0].embedding, vec![0.25, -0.5, 0.125]);
        assert_eq!(provider.last().path, "/v1/embeddings");

        // The models this key may use.
        let models = client.models().list().await.unwrap();
        assert!(models.data.iter().any(|m| m.id == "gpt-4o-mini"));

        // All three requests reach the ledger, attributed to the key's agent.
        let key = tenant.admin_key.clone();
        let by_agent = eventually(Duration::from_secs(10), || {
            let (app, key) = (&app, key.clone());
            async move {
                let body = expect_status(app.get("/cost/by-agent", &key).await, 200).await;
                (body["data"][0]["requests"] == json!(3)).then_some(body)
            }
        })
        .await;
        assert_eq!(by_agent["data"][0]["agent_id"], json!(agent_id));
        let summary = expect_status(app.get("/cost/summary", &tenant.admin_key).await, 200).await;
        assert_eq!(
            summary["data"]["total_input_tokens"],
            json!(2 * PROMPT_TOKENS + 5)
        );
        assert_eq!(
            summary["data"]["total_output_tokens"],
            json!(2 * COMPLETION_TOKENS)
        );
        assert!(summary["data"]["total_cost_usd"].as_f64().unwrap() > 0.0);
        let models = expect_status(app.get("/cost/by-model", &tenant.admin_key).await, 200).await;
        let names: Vec<&str> = models["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["model_name"].as_str().unwrap_or_default())
            .collect();
        assert!(
            names.contains(&"gpt-4o-mini") && names.contains(&"text-embedding-3-small"),
            "{names:?}"
        );
    }
);

db_test!(a_client_that_asks_for_usage_keeps_its_usage_chunk, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "usage" }))
        .await;
    let response = proxy
        .chat(
            &raw_key,
            json!({ "model": "gpt-4o", "stream": true, "stream_options": { "include_usage": true },
                    "messages": [{ "role": "user", "content": "hi" }] }),
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    assert!(text.contains("\"prompt_tokens\":11"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
});

db_test!(
    connections_are_served_alike_on_event_loops_and_on_the_shared_runtime,
    |app| {
        let provider = MockProvider::start().await;
        for loops in [0, 3] {
            let proxy =
                TestProxy::start_with(&app, &provider, |config| config.event_loops = loops).await;
            let (_, raw_key, _) = proxy
                .tenant_with_key(&app, json!({ "developer_label": "loops" }))
                .await;
            // A client each: connections of their own, dealt to every loop.
            let requests = (0..6).map(|index| {
                let base = proxy.base.clone();
                let raw_key = raw_key.clone();
                async move {
                    let client = reqwest::Client::new();
                    let body = json!({ "model": "gpt-4o-mini", "stream": index % 2 == 1,
                                       "messages": [{ "role": "user", "content": "hi" }] });
                    let mut answers = Vec::new();
                    for _ in 0..2 {
                        let response = client
                            .post(format!("{base}/v1/chat/completions"))
                            .bearer_auth(&raw_key)
                            .json(&body)
                            .send()
                            .await
                            .unwrap();
                        answers.push((response.status().as_u16(), response.text().await.unwrap()));
                    }
                    answers
                }
            });
            for (status, text) in futures_util::future::join_all(requests)
                .await
                .into_iter()
                .flatten()
            {
                assert_eq!(status, 200, "event_loops = {loops}: {text}");
                assert!(text.contains("Hello"), "event_loops = {loops}: {text}");
            }
        }
    }
);
