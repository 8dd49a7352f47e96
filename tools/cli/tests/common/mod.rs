//! What several CLI tests start from: a simulated cluster's log, loaded into a fresh
//! nats-server.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use fairshare_events::pb;
use fairshare_sim::engine::{self, EngineConfig};
use fairshare_sim::scenarios;
use fairshare_testkit::NatsServer;

/// The named scenario's cluster and fairshare log.
pub fn simulated_log(scenario: &str) -> (String, Vec<pb::Event>) {
    let s = scenarios::by_name(scenario).unwrap().unwrap();
    let run = engine::run(&s.setup, &s.workload, &EngineConfig::default(), |_| {});
    (s.setup.cluster, run.log)
}

/// A fresh nats-server holding `log` as cluster `cluster`'s events.
pub fn server_with(cluster: &str, log: &[pb::Event]) -> NatsServer {
    server_then(|js| async move {
        let loaded = fairshare_sim::load::load_log(&js, cluster, log)
            .await
            .unwrap();
        assert_eq!(loaded, log.len() as u64);
    })
}

/// A fresh nats-server with the streams made, after `fill` ran against it.
pub fn server_then<F, Fut>(fill: F) -> NatsServer
where
    F: FnOnce(async_nats::jetstream::Context) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (server, js) = NatsServer::with_streams().await;
        fill(js).await;
        server
    })
}

/// A command's standard output, as text.
pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command's standard error, as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
