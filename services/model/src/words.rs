//! Counts in words for the messages people read (explanations, CLI output, audit findings):
//! "1 GPU", "8 GPUs". Recorded reasons in the log keep the words they were written with, since
//! the audit compares them word for word.

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

#[cfg(test)]
mod tests {
    use super::Gpus;

    #[test]
    fn one_gpu_is_singular_and_every_other_count_plural() {
        assert_eq!(Gpus(1).to_string(), "1 GPU");
        assert_eq!(Gpus(0).to_string(), "0 GPUs");
        assert_eq!(Gpus(8).to_string(), "8 GPUs");
    }
}
