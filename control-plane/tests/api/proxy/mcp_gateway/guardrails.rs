//! `guardrail` policies on tool calls: the ten kinds of the model-request matrix
//! (`proxy::guardrails`) in a tool's arguments, through the MCP SDK, each blocked,
//! redacted before the server sees it, or flagged and sent as it is.

use serde_json::json;

use super::{call, register, Upstream};
use crate::helpers::create_policy;
use crate::proxy::guardrails::{guardrail, KINDS};
use crate::proxy::{MockProvider, TestProxy};

db_test!(
    guardrails_scan_tool_arguments_for_every_kind,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let gateway = format!("{}/mcp", proxy.base);
        for action in ["block", "redact", "flag"] {
            let (tenant, key, _) = proxy
                .tenant_with_key(
                    &app,
                    json!({ "developer_label": format!("tools-{action}") }),
                )
                .await;
            register(&app, &tenant.admin_key, &upstream).await;
            create_policy(&app, &tenant.admin_key, guardrail(action)).await;
            for (detector, text, secret) in KINDS {
                let answer = call(
                    &gateway,
                    &key,
                    "docs__create_issue",
                    json!({ "title": text, "body": "-" }),
                )
                .await;
                let case = format!("{action} {detector}: {answer}");
                let shown = answer.to_string();
                match action {
                    "block" => {
                        assert_eq!(
                            answer["error"]["data"]["code"],
                            json!("guardrail_violation"),
                            "{case}"
                        );
                        assert!(shown.contains(detector), "{case}");
                        assert!(!shown.contains(secret), "{case}");
                    }
                    "redact" => {
                        let opened = answer["text"].as_str().unwrap_or_default();
                        assert!(opened.contains(&format!("[REDACTED:{detector}]")), "{case}");
                        assert!(!opened.contains(secret), "{case}");
                    }
                    _ => assert_eq!(answer["text"], json!(format!("opened: {text}")), "{case}"),
                }
            }
        }
    }
);

db_test!(
    a_tool_calls_member_names_and_private_keys_are_scanned_whole,
    |config| config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()],
    |app| {
        let upstream = Upstream::start().await;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let gateway = format!("{}/mcp", proxy.base);
        let secret = "AKIAQYLPMN5HHHFPZAM2";
        let body_line = "MIIEowIBAAKCAQEAv1bXq9L3kTzWc8pYfR2nJ5sE0dHgUiOaBmC4xNvQeT7rKwPy";
        for action in ["block", "redact"] {
            let (tenant, key, _) = proxy
                .tenant_with_key(
                    &app,
                    json!({ "developer_label": format!("names-{action}") }),
                )
                .await;
            register(&app, &tenant.admin_key, &upstream).await;
            create_policy(&app, &tenant.admin_key, guardrail(action)).await;
            // A secret as the name of an argument.
            let answer = call(
                &gateway,
                &key,
                "docs__create_issue",
                json!({ "title": "t", "body": "-", secret: "x" }),
            )
            .await;
            let shown = answer.to_string();
            assert!(!shown.contains(secret), "{action}: {shown}");
            if action == "block" {
                assert_eq!(
                    answer["error"]["data"]["code"],
                    json!("guardrail_violation")
                );
                assert!(shown.contains("aws_access_key in the name of *"), "{shown}");
            } else {
                assert_eq!(answer["text"], json!("opened: t"), "{shown}");
            }
            // A private key, whole.
            let pem = format!(
                "-----BEGIN EC PRIVATE KEY-----\n{body_line}\n-----END EC PRIVATE KEY-----"
            );
            let answer = call(
                &gateway,
                &key,
                "docs__create_issue",
                json!({ "title": format!("key: {pem}"), "body": "-" }),
            )
            .await;
            let shown = answer.to_string();
            assert!(!shown.contains(body_line), "{action}: {shown}");
            if action == "redact" {
                assert_eq!(answer["text"], json!("opened: key: [REDACTED:private_key]"));
            }
        }
    }
);
