//! Counts in words for the messages people read (explanations, CLI output, audit findings):
//! "1 GPU", "8 GPUs", "1 node". The preemption service's order reasons use them too: an audit
//! of a log written before they did compares the old words (re-audit from a later sequence).

use std::fmt;

/// A GPU count that reads as "1 GPU" or "n GPUs" in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpus(pub u64);

impl fmt::Display for Gpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 1 {
            f.write_str("1 GPU")
        } else {
            write!(f, "{} GPUs", self.0)
        }
    }
}

/// `n` and `noun`, plural with an "s" unless `n` is 1: "1 node", "16 nodes" (for nouns whose
/// plural is that regular).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{Gpus, count};

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(count(1, "allocation"), "1 allocation");
        assert_eq!(count(0, "node"), "0 nodes");
        assert_eq!(count(16, "node"), "16 nodes");
    }

    #[test]
    fn one_gpu_is_singular_and_every_other_count_plural() {
        assert_eq!(Gpus(1).to_string(), "1 GPU");
        assert_eq!(Gpus(0).to_string(), "0 GPUs");
        assert_eq!(Gpus(8).to_string(), "8 GPUs");
    }
}
