//! Serde forms of the shared model types the decision state holds ([`BudgetTree`],
//! [`Inventory`], [`Shape`]), for the shell's sled checkpoint.
//!
//! Those types live in `fairshare-model` without serde, so the state's fields name these
//! modules with `#[serde(with = ...)]`; the budget tree's and the inventory's are
//! [`fairshare_model::stored`]'s, shared with the submission service's checkpoint.
//!
//! The state itself loads through [`Stored`], which holds what a checkpoint holds and then
//! rebuilds the parts derived for speed.

use std::collections::BTreeMap;
use std::sync::Arc;

use fairshare_model::budget::BudgetTree;
use fairshare_model::inventory::Inventory;
use fairshare_model::shape::Shape;
use serde::{Deserialize, Serialize};

use super::debug;
use super::flat::FlatMap;
use super::flight::FlightIndex;
use super::hourly::{HourMeter, OwedBefore};
use super::nodes::NodeIndex;
use super::promise::Promise;
use super::queue::SortedChunks;
use super::rank;
use super::state::{
    AllocationQueue, DecisionState, EndedRuns, InFlight, Job, NodeLoad, Usage, Window, shape_key,
};

/// [`DecisionState`] as a checkpoint holds it: the same fields, names, order and serde forms
/// as the state's derived `Serialize` writes (a field added to the state must be added here
/// too; the round-trip tests catch a mismatch). Loading goes through it so the derived
/// holders can be filled in once every job is read.
#[derive(Deserialize)]
#[serde(rename = "DecisionState")]
pub(crate) struct Stored {
    cluster: String,
    last_applied: u64,
    #[serde(with = "budget_tree")]
    tree: Option<BudgetTree>,
    #[serde(with = "inventory")]
    inventory: Inventory,
    maintenance: BTreeMap<String, Vec<Window>>,
    loads: FlatMap<Arc<str>, NodeLoad>,
    jobs: BTreeMap<Arc<str>, Job>,
    queues: BTreeMap<Arc<str>, AllocationQueue>,
    in_flight: BTreeMap<Arc<str>, SortedChunks<Arc<str>, InFlight>>,
    usage: Option<Usage>,
    ended: BTreeMap<Arc<str>, EndedRuns>,
    promises: BTreeMap<Arc<str>, Promise>,
    meters: BTreeMap<Arc<str>, HourMeter>,
    capacity_meter: HourMeter,
    owed_before: OwedBefore,
}

impl From<Stored> for DecisionState {
    fn from(s: Stored) -> DecisionState {
        let mut state = DecisionState {
            cluster: s.cluster,
            last_applied: s.last_applied,
            allocations_by_path: s
                .tree
                .as_ref()
                .map(rank::allocations_by_path)
                .unwrap_or_default(),
            tree: s.tree,
            inventory: s.inventory,
            registered: NodeIndex::default(),
            maintenance: s.maintenance,
            loads: s.loads,
            jobs: s.jobs,
            queues: s.queues,
            queued_shapes: BTreeMap::new(),
            in_flight: s.in_flight,
            flight: FlightIndex::default(),
            usage: s.usage,
            ended: s.ended,
            promises: s.promises,
            debug_allowance_gpus: debug::DEFAULT_DEBUG_ALLOWANCE_GPUS,
            share_floor: true,
            meters: s.meters,
            capacity_meter: s.capacity_meter,
            owed_before: s.owed_before,
            hourly_floor: true,
            usage_window_ms: None,
        };
        for queue in state.queues.values_mut() {
            queue.debug = queue
                .allocated
                .iter()
                .filter(|(_, r)| debug::is_candidate(r))
                .map(|(k, r)| (k.clone(), *r))
                .collect();
            queue.queued_gpus = queue
                .allocated
                .iter()
                .map(|(_, r)| r.shape.total_gpus())
                .fold(0u64, u64::saturating_add);
            for (_, r) in queue.allocated.iter().chain(queue.unallocated.iter()) {
                *state.queued_shapes.entry(shape_key(r.shape)).or_insert(0) += 1;
            }
        }
        // The ended runs' sums are derived: summed again beyond the held window end.
        if let Some(window_end) = state.usage.as_ref().map(|u| u.window_end_ms) {
            for runs in state.ended.values_mut() {
                runs.retain_beyond(window_end, |_| true);
            }
        }
        for (allocation, runs) in &state.in_flight {
            for (job, run) in runs.iter() {
                state.flight.insert(allocation, job, *run);
            }
        }
        state.copy_inventory();
        state.refill_holders();
        state
    }
}

/// [`Shape`] field for field.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Shape")]
pub(crate) struct ShapeDef {
    nodes: u32,
    gpus_per_node: u32,
}

// The budget tree and the inventory are stored as `fairshare_model::stored` writes them, so
// every service's checkpoint stores them alike.
pub(crate) use fairshare_model::stored::{budget_tree, inventory};
