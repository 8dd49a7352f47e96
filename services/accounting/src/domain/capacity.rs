//! Available GPU capacity of one cluster over time.
//!
//! Place in the flow: `NodeRegistered` and `NodeRemoved` change the set of registered nodes;
//! capacity is the sum of their GPUs (cordoned nodes still count: they are available capacity
//! that maintenance takes away deliberately, and budgets are claims on the whole cluster). The
//! integral of capacity over time feeds allocated time (see [`super::budget`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::curve::Curve;

/// Registered nodes and the integral of their GPUs over time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    nodes: BTreeMap<String, u32>,
    /// Rate = GPUs registered.
    pub curve: Curve,
}

impl Capacity {
    /// Registers `node` with `gpus` at `t`, or changes its GPU count if already registered.
    pub fn register(&mut self, t: i64, node: &str, gpus: u32) {
        let old = self.nodes.insert(node.to_owned(), gpus).unwrap_or(0);
        let rate = self.curve.rate().saturating_sub(u64::from(old));
        self.curve.set_rate(t, rate.saturating_add(u64::from(gpus)));
    }

    /// Removes `node` at `t`; returns whether it was registered.
    pub fn remove(&mut self, t: i64, node: &str) -> bool {
        match self.nodes.remove(node) {
            Some(gpus) => {
                self.curve.sub(t, u64::from(gpus));
                true
            }
            None => false,
        }
    }

    /// Whether `node` is registered now.
    pub fn has(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// GPUs registered now.
    pub fn gpus(&self) -> u64 {
        self.curve.rate()
    }

    /// Nodes registered now.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }
}
