//! The proxy state stream: a snapshot, then deltas for blocks and revocations, resuming
//! from a version, service token only.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_shared::keys::hash_credential;
use warden_shared::snapshot::{Entity, EntityRef, StreamMessage};

use crate::helpers::{expect_status, TestApp, SERVICE_TOKEN};

/// Reads newline-delimited messages from the stream.
pub struct Stream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Stream {
    pub async fn open(app: &TestApp, since: Option<i64>) -> Stream {
        let mut url = format!("{}/internal/v1/proxy-state", app.base);
        if let Some(since) = since {
            url.push_str(&format!("?since={since}"));
        }
        let response = app
            .client
            .get(url)
            .bearer_auth(SERVICE_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-type"], "application/x-ndjson");
        Stream {
            response,
            buffer: Vec::new(),
        }
    }

    pub async fn next(&mut self) -> StreamMessage {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(15), self.response.chunk())
                .await
                .expect("the stream went silent")
                .unwrap()
                .expect("the stream ended");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// The first message `accept` takes, within five seconds. Other tests share the
    /// database, so their changes stream past too.
    async fn until<T>(&mut self, mut accept: impl FnMut(&StreamMessage) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline, "no matching message within 5 s");
            let message = self.next().await;
            if let Some(found) = accept(&message) {
                return found;
            }
        }
    }
}

fn version_of(message: &StreamMessage) -> i64 {
    match message {
        StreamMessage::Snapshot(s) => s.version,
        StreamMessage::Delta(d) => d.version,
        StreamMessage::Heartbeat { version } => *version,
        StreamMessage::Spend { .. } => panic!("spend carries no version"),
    }
}

db_test!(the_stream_carries_keys_blocks_and_revocations, |app| {
    let tenant = app.new_tenant("starter").await;
    let created = expect_status(
        app.post(
            "/proxy-keys",
            &tenant.admin_key,
            json!({ "developer_label": "streamed", "allowed_models": ["gpt-4o-mini"] }),
        )
        .await,
        201,
    )
    .await["data"]
        .clone();
    let key_id = created["api_key_id"].as_str().unwrap().to_owned();
    let agent_id = created["agent_id"].as_str().unwrap().to_owned();
    let raw = created["raw_key"].as_str().unwrap();

    let mut stream = Stream::open(&app, None).await;
    let snapshot = match stream.next().await {
        StreamMessage::Snapshot(snapshot) => snapshot,
        other => panic!("expected a snapshot first, got {other:?}"),
    };
    let key = snapshot.keys.iter().find(|k| k.id == key_id).unwrap();
    assert_eq!(key.key_hash, hash_credential(raw));
    assert_eq!(key.allowed_models, ["gpt-4o-mini"]);
    assert_eq!(key.agent_id, agent_id);
    assert!(snapshot
        .agents
        .iter()
        .any(|a| a.id == agent_id && !a.blocked));
    assert!(snapshot
        .tenants
        .iter()
        .any(|t| t.id == tenant.id && t.plan == "starter"));

    // A block arrives as the agent's new state.
    let blocked_at = Instant::now();
    let response = app
        .post(
            &format!("/agents/{agent_id}/block"),
            &tenant.admin_key,
            json!({ "reason": "test" }),
        )
        .await;
    assert_eq!(response.status().as_u16(), 204);
    let after_block = stream
        .until(|message| match message {
            StreamMessage::Delta(delta) => delta
                .upserts
                .iter()
                .any(|e| matches!(e, Entity::Agent(a) if a.id == agent_id && a.blocked))
                .then_some(delta.version),
            _ => None,
        })
        .await;
    assert!(after_block > snapshot.version);
    eprintln!("block reached the stream in {:?}", blocked_at.elapsed());

    // A revocation arrives as a removal.
    let response = app
        .delete(&format!("/proxy-keys/{key_id}"), &tenant.admin_key)
        .await;
    assert_eq!(response.status().as_u16(), 204);
    stream
        .until(|message| match message {
            StreamMessage::Delta(delta) => delta
                .removals
                .contains(&EntityRef::Key(key_id.clone()))
                .then_some(()),
            _ => None,
        })
        .await;

    // A proxy that had the state right after the block catches up with deltas only.
    let mut resumed = Stream::open(&app, Some(after_block)).await;
    let first = resumed.next().await;
    assert!(matches!(first, StreamMessage::Delta(_)), "{first:?}");
    assert!(version_of(&first) > after_block);
    let mut removal_seen = matches!(&first, StreamMessage::Delta(d) if d.removals.contains(&EntityRef::Key(key_id.clone())));
    while !removal_seen {
        let next = resumed.next().await;
        assert!(!matches!(next, StreamMessage::Snapshot(_)));
        removal_seen = matches!(&next, StreamMessage::Delta(d) if d.removals.contains(&EntityRef::Key(key_id.clone())));
    }

    // A version the control plane never issued gets a full snapshot.
    let mut fresh = Stream::open(&app, Some(i64::MAX)).await;
    assert!(matches!(fresh.next().await, StreamMessage::Snapshot(_)));
});

db_test!(the_stream_needs_the_service_token, |app| {
    let tenant = app.new_tenant("starter").await;
    for key in [
        tenant.admin_key.as_str(),
        crate::helpers::platform_key(),
        "nonsense",
    ] {
        let response = app
            .client
            .get(format!("{}/internal/v1/proxy-state", app.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["success"], json!(false));
    }
    let response = app
        .client
        .get(format!("{}/internal/v1/proxy-state?since=abc", app.base))
        .bearer_auth(SERVICE_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
});

/// On SQLite a proxy's acknowledgement is written in its turn among the writers, not by a
/// statement that meets the write lock held and sleeps in the busy handler (under load,
/// late acknowledgements hold writes waiting for read-your-writes, and late lease
/// renewals let connected proxies stop counting). With the busy handler off, an
/// acknowledgement that met the lock held would fail at once.
#[tokio::test]
async fn an_acknowledgement_waits_its_turn_among_sqlite_writers() {
    let app = TestApp::spawn_with(crate::helpers::Backend::Sqlite, |_| {}).await;
    crate::helpers::without_busy_handler(&app).await;
    let ahead = app.db.begin_write().await.unwrap();
    let ack = json!({ "proxy": "ins_waiting_proxy", "version": 1 });
    let (answer, ()) = tokio::join!(
        app.post_internal("proxy-acks", SERVICE_TOKEN, &ack),
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            ahead.commit().await.unwrap();
        }
    );
    expect_status(answer, 204).await;
}
