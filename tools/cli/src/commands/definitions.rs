//! `fairshare streams --write-definitions DIR`: the JetStream streams and the durable intake
//! consumer as JSON files, for operators who create them with the `nats` CLI (or review them)
//! rather than letting the services create them at start.
//!
//! Place in the flow: before anything runs. The definitions are the ones the services use
//! ([`fairshare_runtime::nats::stream_config`], [`fairshare_runtime::nats::intake_consumer_config`]),
//! serialized as the JetStream API takes them; `deploy/nats/jetstream/` holds a copy that a test
//! keeps equal to this output.

use std::path::Path;

use anyhow::Context;
use fairshare_events::streams;
use fairshare_runtime::nats::{intake_consumer_config, stream_config};

/// Writes `<stream>.json` per stream (with `replicas` replicas) and
/// `<stream>.<consumer>.consumer.json` for the intake consumer into `dir`.
pub fn write(dir: &Path, replicas: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut files = Vec::new();
    for spec in streams::all() {
        let json = serde_json::to_string_pretty(&stream_config(&spec, replicas))?;
        files.push((format!("{}.json", spec.name), json));
    }
    let consumer = serde_json::to_string_pretty(&intake_consumer_config())?;
    files.push((
        format!(
            "{}.{}.consumer.json",
            streams::INTAKE_STREAM,
            streams::INTAKE_CONSUMER
        ),
        consumer,
    ));
    for (name, json) in files {
        let path = dir.join(&name);
        std::fs::write(&path, format!("{json}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        fairshare_runtime::outln!("wrote {}", path.display());
    }
    Ok(())
}
