//! Bringing streams to the current definition against a real nats-server: an update changes
//! only what the definition owns, keeping the stream's replicas (a caller's default must not
//! change them) and what an operator set beyond it; a log kept in memory is refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::streams::{self, EVENTS_STREAM};
use fairshare_runtime::nats::{ensure_streams, stream_config};
use fairshare_testkit::NatsServer;

#[tokio::test]
async fn an_out_of_date_stream_is_updated_and_keeps_its_replicas() {
    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    // Both streams with one copy; the events stream as an older release defined it, with
    // another duplicate window.
    for spec in streams::all() {
        let mut config = stream_config(&spec, 1);
        if spec.name == EVENTS_STREAM {
            config.duplicate_window = Duration::from_secs(60);
            // Set by an operator beyond the definition: kept by the update.
            config.max_bytes = 1 << 30;
            config.deny_purge = true;
        }
        js.create_stream(config).await.unwrap();
    }
    let spec = streams::all()
        .into_iter()
        .find(|s| s.name == EVENTS_STREAM)
        .unwrap();

    // Asked for 3 replicas (a cluster's setting) on this single server: only the definition
    // is brought up to date; the replicas stay (a change to 3 would fail here, and a default
    // of 1 would shrink a replicated stream elsewhere).
    ensure_streams(&js, 3).await.unwrap();
    let mut stream = js.get_stream(EVENTS_STREAM).await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    assert_eq!(config.duplicate_window, spec.duplicate_window);
    assert_eq!(config.num_replicas, 1);
    assert_eq!((config.max_bytes, config.deny_purge), (1 << 30, true));
}

/// An events stream kept in memory would lose the log on a restart: refused, by name, rather
/// than used.
#[tokio::test]
async fn a_log_stream_kept_in_memory_is_refused() {
    let server = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    for spec in streams::all() {
        let mut config = stream_config(&spec, 1);
        if spec.name == EVENTS_STREAM {
            config.storage = jetstream::stream::StorageType::Memory;
        }
        js.create_stream(config).await.unwrap();
    }
    let refused = ensure_streams(&js, 1).await.unwrap_err();
    assert_eq!(refused.stream, EVENTS_STREAM);
    assert!(refused.detail.contains("Memory"), "{}", refused.detail);
}
