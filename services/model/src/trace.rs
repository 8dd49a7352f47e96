//! Job traces in the `replay.csv` schema (see `tests/data/traces/README.md`): one row per real
//! job, which the demo launcher submits and the simulator replays.
//!
//! This is only the file format; turning a row into a job of this product (allocation, minimum
//! runtime, unallocated or not) is a rule of whoever replays it.

/// One row of a replay trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    /// The trace's job id.
    pub id: String,
    /// Seconds since the trace's start.
    pub submit_s: i64,
    /// Observed run time in seconds.
    pub duration_s: i64,
    /// GPUs used.
    pub gpus: i64,
    /// User, else group, else "anonymous".
    pub tenant: String,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
#[error("trace line {line}: {what}")]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

/// Parses `replay.csv` (header `job_id,submit_time,duration,num_gpus,user,group,...`).
pub fn parse_replay(text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let err = |what: &str| TraceError {
            line: i + 1,
            what: what.to_owned(),
        };
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() < 6 {
            return Err(err("expected at least 6 columns"));
        }
        let num = |c: &str, what: &str| -> Result<i64, TraceError> {
            c.trim()
                .parse::<f64>()
                .map(|v| v as i64)
                .map_err(|_| err(what))
        };
        let tenant = [cols[4], cols[5]]
            .into_iter()
            .find(|t| !t.trim().is_empty())
            .unwrap_or("anonymous")
            .trim()
            .to_owned();
        jobs.push(TraceJob {
            id: cols[0].to_owned(),
            submit_s: num(cols[1], "submit_time is not a number")?,
            duration_s: num(cols[2], "duration is not a number")?,
            gpus: num(cols[3], "num_gpus is not a number")?,
            tenant,
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_trace_flavours() {
        let text = "job_id,submit_time,duration,num_gpus,user,group,status,num_nodes\n\
                    he1,0,84,1,u001,,Pass,1\n\
                    ab-c,1999,13423,8,,cluster07,,\n\
                    cpu,5,10,0,u002,,Pass,1\n";
        let jobs = parse_replay(text).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].tenant, "u001");
        assert_eq!(jobs[1].tenant, "cluster07");
        assert_eq!(jobs[1].gpus, 8);
        assert!(parse_replay("h\nx,notanumber,1,1,u,g\n").is_err());
    }
}
