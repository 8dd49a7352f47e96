//! The virtual clock a baseline runs on, and the log it writes.
//!
//! Place in the flow: [`super::run`] hands a workload and a [`Policy`] to [`replay`], which
//! plays the workload's submissions and actions and the jobs' finishes in time order, asks the
//! policy for a scheduling pass after each batch of same-time happenings, and writes the
//! contract events a real system running that policy would have written. The metrics fold reads
//! that log exactly as it reads fairshare's.
//!
//! Order at one instant (deterministic, so two runs write the same log): finishes (by ticket),
//! then actions (workload order), then submissions (workload order), then the placements of the
//! pass. Nothing later than the setup's end is written: jobs still queued or running then just
//! stop appearing. Happenings before the epoch (where the log starts) are taken at the epoch,
//! so event times never go back.
//!
//! Acceptance mirrors the submission service's checks that matter here: a job whose allocation
//! is not a leaf of the tree in force, or whose GPUs cannot be given a shape on the registered
//! nodes, is rejected and leaves no trace in the log.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use fairshare_events::pb;
use fairshare_events::pb::event::Body;
use fairshare_model::budget::BudgetTree;
use fairshare_model::inventory::Inventory;
use fairshare_model::shape::{self, Shape};
use fairshare_submission::domain::job_submitted;

use super::allocations::Allocations;
use super::cluster::{Cluster, Running};
use super::pass::Start;
use super::place::Nodes;
use super::policy::{Job, Policy};
use crate::setup::{EPOCH_MS, Setup};
use crate::workload::{Action, Workload, job_id};

/// Something that happens at an instant; the variant order is the order at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// The job with this ticket finishes.
    Finish(usize),
    /// The workload's action with this index.
    Act(usize),
    /// The workload's job with this index is submitted.
    Submit(usize),
}

/// The log of `workload` run on `setup` under `policy`.
pub(crate) fn replay(
    policy: &mut dyn Policy,
    setup: &Setup,
    workload: &Workload,
) -> Vec<pb::Event> {
    let mut run = Replay::new(setup, workload);
    policy.set_shares(&run.allocations.fractions(run.tree()));
    policy.set_tree(run.tree(), &run.allocations);
    let mut started = Vec::new();
    while let Some(&Reverse((now, _))) = run.agenda.peek() {
        // The span's end is exclusive, as in the fairshare engine: what would happen at
        // `end_ms` is not in the log of either.
        if now >= setup.end_ms {
            break;
        }
        policy.advance(now);
        while run.agenda.peek().is_some_and(|Reverse((t, _))| *t == now) {
            let Some(Reverse((_, happening))) = run.agenda.pop() else {
                break;
            };
            match happening {
                Happening::Finish(ticket) => run.finish(ticket, now, policy),
                Happening::Act(index) => run.act(index, now, policy),
                Happening::Submit(index) => run.submit(index, now, policy),
            }
        }
        // Nothing can start while no open node has a free GPU: skip the pass rather than walk
        // queues that may hold tens of thousands of jobs.
        if run.cluster.nodes.free_gpus() > 0 {
            run.cluster.now_ms = now;
            policy.pass(&run.jobs, &mut run.cluster, &mut started);
            for start in started.drain(..) {
                run.start(start, now);
            }
        }
    }
    run.log
}

/// The state of one replay.
struct Replay<'w> {
    setup: &'w Setup,
    workload: &'w Workload,
    log: Vec<pb::Event>,
    agenda: BinaryHeap<Reverse<(i64, Happening)>>,
    /// Registered nodes, for resolving shapes as the submission service does.
    inventory: Inventory,
    /// Resolved shapes by (GPUs, nodes) asked. Resolving scans the inventory, and a trace asks
    /// for a handful of sizes tens of thousands of times; the inventory is fixed for the run.
    shapes: BTreeMap<(i64, i64), Option<Shape>>,
    /// Free GPUs per node and the running jobs.
    cluster: Cluster,
    /// The validated tree of each `SetBudget` action (`None` for other actions and for trees
    /// that do not validate, which leave the tree in force unchanged, as the services do).
    trees: Vec<Option<BudgetTree>>,
    /// Index into `trees` of the tree in force; `None` is the setup's.
    tree_in_force: Option<usize>,
    allocations: Allocations,
    /// Accepted jobs by ticket.
    jobs: Vec<Job>,
}

impl<'w> Replay<'w> {
    fn new(setup: &'w Setup, workload: &'w Workload) -> Replay<'w> {
        let mut inventory = Inventory::default();
        for (node, gpus) in &setup.nodes {
            inventory.register(node, *gpus);
        }
        let trees: Vec<Option<BudgetTree>> = workload
            .actions
            .iter()
            .map(|timed| match &timed.action {
                Action::SetBudget(set) => BudgetTree::from_accounts(&set.accounts).ok(),
                _ => None,
            })
            .collect();
        let allocations =
            Allocations::new(std::iter::once(&setup.tree).chain(trees.iter().flatten()));
        let mut agenda = BinaryHeap::with_capacity(workload.jobs.len() + workload.actions.len());
        for (index, job) in workload.jobs.iter().enumerate() {
            agenda.push(Reverse((
                job.submit_ms.max(EPOCH_MS),
                Happening::Submit(index),
            )));
        }
        for (index, timed) in workload.actions.iter().enumerate() {
            agenda.push(Reverse((timed.at_ms.max(EPOCH_MS), Happening::Act(index))));
        }
        Replay {
            setup,
            workload,
            log: setup.initial_events(EPOCH_MS),
            agenda,
            cluster: Cluster {
                nodes: Nodes::new(&inventory),
                running: Running::default(),
                now_ms: EPOCH_MS,
            },
            inventory,
            shapes: BTreeMap::new(),
            trees,
            tree_in_force: None,
            allocations,
            jobs: Vec::new(),
        }
    }

    fn tree(&self) -> &BudgetTree {
        self.tree_in_force
            .and_then(|i| self.trees.get(i))
            .and_then(Option::as_ref)
            .unwrap_or(&self.setup.tree)
    }

    fn write(&mut self, at_ms: i64, body: Body) {
        self.log.push(pb::Event {
            at_ms,
            body: Some(body),
        });
    }

    fn submit(&mut self, index: usize, now: i64, policy: &mut dyn Policy) {
        let workload = self.workload;
        let sim = &workload.jobs[index];
        let request = sim.request(&self.setup.cluster);
        let Some(spec) = &request.spec else {
            return;
        };
        if self.tree().allocation(&spec.allocation).is_none() {
            return;
        }
        let Some(allocation) = self.allocations.slot(&spec.allocation) else {
            return;
        };
        let inventory = &self.inventory;
        let resolved = *self
            .shapes
            .entry((spec.gpus, spec.nodes))
            .or_insert_with(|| shape::resolve(spec.gpus, spec.nodes, inventory).ok());
        let Some(shape) = resolved else {
            return;
        };
        let job = Job {
            id: job_id(index, sim.submit_ms),
            allocation,
            shape,
            priority: sim.priority,
            duration_ms: sim.duration_ms.max(0),
            unallocated: sim.min_runtime_ms <= 0,
        };
        let body = Body::JobSubmitted(job_submitted(&job.id, &request, shape));
        self.write(now, body);
        let ticket = self.jobs.len();
        policy.enqueue(ticket, &job);
        self.jobs.push(job);
    }

    fn act(&mut self, index: usize, now: i64, policy: &mut dyn Policy) {
        let workload = self.workload;
        let action = &workload.actions[index].action;
        self.write(now, action.body(&self.setup.cluster));
        match action {
            Action::SetBudget(_) => {
                if self.trees.get(index).is_some_and(Option::is_some) {
                    self.tree_in_force = Some(index);
                    policy.set_shares(&self.allocations.fractions(self.tree()));
                    policy.set_tree(self.tree(), &self.allocations);
                }
            }
            Action::Cordon { node } => self.cluster.nodes.cordon(node),
            Action::Uncordon { node } => self.cluster.nodes.uncordon(node),
            // These baselines know no maintenance windows: nothing drains for them.
            Action::Maintenance { .. } => {}
        }
    }

    fn start(&mut self, start: Start, now: i64) {
        let job = &self.jobs[start.ticket];
        let placed = pb::JobPlaced {
            job_id: job.id.clone(),
            nodes: start
                .held
                .iter()
                .map(|&(node, gpus)| pb::NodeGpus {
                    node: self.cluster.nodes.name(node).to_owned(),
                    gpus,
                })
                .collect(),
            basis: None,
        };
        let running = pb::JobStarted {
            job_id: job.id.clone(),
        };
        let ends = now.saturating_add(job.duration_ms);
        self.write(now, Body::JobPlaced(placed));
        self.write(now, Body::JobStarted(running));
        self.agenda
            .push(Reverse((ends, Happening::Finish(start.ticket))));
    }

    fn finish(&mut self, ticket: usize, now: i64, policy: &mut dyn Policy) {
        let held = self.cluster.running.finish(ticket);
        self.cluster.nodes.release(&held);
        let job = &self.jobs[ticket];
        policy.finished(job);
        let body = Body::JobFinished(pb::JobFinished {
            job_id: job.id.clone(),
            exit_code: 0,
        });
        self.write(now, body);
    }
}
