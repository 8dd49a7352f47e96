//! Resolving a requested GPU and node count into a shape the cluster can hold.
//!
//! A job either fits on one node, or spans whole nodes of one size (multi-node jobs take whole
//! nodes, so nothing else shares them and their collective traffic stays on their own links).

use crate::inventory::Inventory;
use crate::words::count;

/// A resolved shape: `nodes` nodes with `gpus_per_node` GPUs each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Nodes the job spans (1 for single-node jobs).
    pub nodes: u32,
    /// GPUs the job takes on each of its nodes.
    pub gpus_per_node: u32,
}

impl Shape {
    /// GPUs over all nodes.
    pub fn total_gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }
}

/// Why a request cannot be given a shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// gpus <= 0.
    #[error("a job needs at least one GPU (asked for {gpus})")]
    NoGpus {
        /// GPUs asked for.
        gpus: i64,
    },
    /// More GPUs than the cluster holds.
    #[error(
        "asked for {} but the cluster has {cluster_gpus}",
        count(.gpus.unsigned_abs(), "GPU")
    )]
    TooManyGpus {
        /// GPUs asked for.
        gpus: i64,
        /// GPUs the cluster has.
        cluster_gpus: u64,
    },
    /// The node count is negative, does not divide the GPUs, or names nodes the cluster lacks.
    #[error("{detail}")]
    Mismatch {
        /// What does not match, in words.
        detail: String,
    },
}

/// Resolves `gpus` over `nodes` (0 = derive) against the cluster's inventory.
pub fn resolve(gpus: i64, nodes: i64, inventory: &Inventory) -> Result<Shape, ShapeError> {
    if gpus <= 0 {
        return Err(ShapeError::NoGpus { gpus });
    }
    let cluster_gpus = inventory.total_gpus();
    if gpus as u64 > cluster_gpus {
        return Err(ShapeError::TooManyGpus { gpus, cluster_gpus });
    }
    if nodes < 0 {
        return Err(ShapeError::Mismatch {
            detail: format!("node count {nodes} is negative"),
        });
    }
    let largest = inventory.largest_node();
    // gpus <= cluster_gpus, which is a sum of u32s over at most a few hundred thousand nodes.
    let gpus_u32 =
        u32::try_from(gpus).map_err(|_| ShapeError::TooManyGpus { gpus, cluster_gpus })?;
    if nodes <= 1 && gpus_u32 <= largest {
        return Ok(Shape {
            nodes: 1,
            gpus_per_node: gpus_u32,
        });
    }
    if nodes == 1 {
        return Err(ShapeError::Mismatch {
            detail: format!("{gpus} GPUs on one node, but the largest node has {largest}"),
        });
    }
    // Whole nodes: either the count given, or as many of the largest nodes as it takes.
    let (node_count, per_node) = if nodes == 0 {
        if gpus_u32 % largest != 0 {
            return Err(ShapeError::Mismatch {
                detail: format!(
                    "{gpus} GPUs do not fit one node and are not a multiple of whole {largest}-GPU nodes"
                ),
            });
        }
        (gpus_u32 / largest, largest)
    } else {
        let n = u32::try_from(nodes).map_err(|_| ShapeError::Mismatch {
            detail: format!("node count {nodes} is larger than the cluster"),
        })?;
        if gpus_u32 % n != 0 {
            return Err(ShapeError::Mismatch {
                detail: format!(
                    "{} cannot be split evenly over {nodes} nodes",
                    count(u64::from(gpus_u32), "GPU")
                ),
            });
        }
        (n, gpus_u32 / n)
    };
    let available = inventory.nodes_with(per_node);
    if available < node_count as usize {
        return Err(ShapeError::Mismatch {
            detail: format!(
                "multi-node jobs take whole nodes: {node_count} nodes x {per_node} GPUs asked, the cluster has {available} nodes of {per_node} GPUs"
            ),
        });
    }
    Ok(Shape {
        nodes: node_count,
        gpus_per_node: per_node,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Inventory {
        let mut inv = Inventory::default();
        for i in 0..4 {
            inv.register(&format!("n{i}"), 8);
        }
        inv.register("small", 4);
        inv
    }

    #[test]
    fn single_node_jobs() {
        let inv = cluster();
        assert_eq!(
            resolve(1, 0, &inv),
            Ok(Shape {
                nodes: 1,
                gpus_per_node: 1
            })
        );
        assert_eq!(
            resolve(8, 1, &inv),
            Ok(Shape {
                nodes: 1,
                gpus_per_node: 8
            })
        );
    }

    #[test]
    fn multi_node_jobs_take_whole_nodes() {
        let inv = cluster();
        assert_eq!(
            resolve(16, 0, &inv),
            Ok(Shape {
                nodes: 2,
                gpus_per_node: 8
            })
        );
        assert_eq!(
            resolve(32, 4, &inv),
            Ok(Shape {
                nodes: 4,
                gpus_per_node: 8
            })
        );
        // Two 4-GPU nodes: only one exists.
        assert!(matches!(
            resolve(8, 2, &inv),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(matches!(
            resolve(12, 0, &inv),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(matches!(
            resolve(9, 1, &inv),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(matches!(
            resolve(10, 3, &inv),
            Err(ShapeError::Mismatch { .. })
        ));
        // The submitter reads the detail: one GPU is "1 GPU".
        for (gpus, words) in [(1, "1 GPU cannot"), (10, "10 GPUs cannot")] {
            match resolve(gpus, 3, &inv) {
                Err(ShapeError::Mismatch { detail }) => assert_eq!(
                    detail,
                    format!("{words} be split evenly over 3 nodes"),
                    "{gpus} GPUs"
                ),
                other => panic!("{gpus} GPUs over 3 nodes: {other:?}"),
            }
        }
        assert!(matches!(
            resolve(8, -1, &inv),
            Err(ShapeError::Mismatch { .. })
        ));
    }

    #[test]
    fn gpu_bounds() {
        let inv = cluster();
        assert_eq!(resolve(0, 0, &inv), Err(ShapeError::NoGpus { gpus: 0 }));
        assert_eq!(resolve(-4, 0, &inv), Err(ShapeError::NoGpus { gpus: -4 }));
        assert_eq!(
            resolve(37, 0, &inv),
            Err(ShapeError::TooManyGpus {
                gpus: 37,
                cluster_gpus: 36
            })
        );
        assert!(matches!(
            resolve(i64::MAX, 0, &inv),
            Err(ShapeError::TooManyGpus { .. })
        ));
        // The submitter reads these words: one GPU is "1 GPU", even on a cluster of none.
        let too_many =
            |gpus, cluster_gpus| ShapeError::TooManyGpus { gpus, cluster_gpus }.to_string();
        assert_eq!(too_many(37, 36), "asked for 37 GPUs but the cluster has 36");
        assert_eq!(too_many(1, 0), "asked for 1 GPU but the cluster has 0");
    }
}
