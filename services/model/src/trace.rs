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

/// Largest time a trace may give, in seconds (about 31,700 years): far beyond any trace, and
/// small enough that milliseconds and sums of many rows stay exact in 64 bits.
pub const MAX_TRACE_SECONDS: f64 = 1e12;

/// Largest GPU count of one row.
pub const MAX_TRACE_GPUS: f64 = 1e6;

/// The columns a `replay.csv` header starts with, in order.
const HEADER: [&str; 4] = ["job_id", "submit_time", "duration", "num_gpus"];

/// Parses `replay.csv` (header `job_id,submit_time,duration,num_gpus,user,group,...`).
///
/// Times may have a fraction (dropped: whole seconds); GPU counts must be whole. A value that
/// is negative, not finite (`nan`, `inf`) or beyond [`MAX_TRACE_SECONDS`] / [`MAX_TRACE_GPUS`]
/// is an error naming its line, as are an empty or repeated job id: replaying such a row would
/// quietly change the workload (a job id is the replay's idempotency key).
pub fn parse_replay(text: &str) -> Result<Vec<TraceJob>, TraceError> {
    // The first line must be the header: a file without one would lose its first job unseen.
    // (A byte-order mark, as spreadsheet exports write, quoted names and any letter case are
    // fine.)
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let header = text.lines().next().unwrap_or_default();
    let named: Vec<String> = header
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_ascii_lowercase())
        .take(HEADER.len())
        .collect();
    if named != HEADER {
        return Err(TraceError {
            line: 1,
            what: format!(
                "expected the header {},user,group,... (the columns of replay.csv), got {header:?}",
                HEADER.join(",")
            ),
        });
    }
    let mut jobs = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let err = |what: &str| TraceError {
            line: i + 1,
            what: what.to_owned(),
        };
        // Columns are split at every comma: a quoted field holding one would shift the rest
        // into the wrong columns unseen (replay.csv quotes nothing).
        if line.contains('"') {
            return Err(err(
                "quoted fields are not read (a comma inside quotes would shift the columns): \
                 write the row without quotes",
            ));
        }
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() < 6 {
            return Err(err("expected at least 6 columns"));
        }
        let num = |c: &str, name: &str, max: f64, whole: bool| -> Result<i64, TraceError> {
            let v = c
                .trim()
                .parse::<f64>()
                .map_err(|_| err(&format!("{name} is not a number: {c:?}")))?;
            if !v.is_finite() || v < 0.0 || v > max {
                return Err(err(&format!(
                    "{name} must be a number from 0 to {max}, got {c:?}"
                )));
            }
            if whole && v.fract() != 0.0 {
                return Err(err(&format!("{name} must be a whole number, got {c:?}")));
            }
            // Finite, in range: the cast is exact for whole numbers and drops a fraction.
            Ok(v as i64)
        };
        let id = cols[0].trim();
        if id.is_empty() {
            return Err(err("job_id is empty"));
        }
        if !ids.insert(id.to_owned()) {
            return Err(err(&format!("job_id {id:?} appears twice")));
        }
        let tenant = [cols[4], cols[5]]
            .into_iter()
            .find(|t| !t.trim().is_empty())
            .unwrap_or("anonymous")
            .trim()
            .to_owned();
        jobs.push(TraceJob {
            id: id.to_owned(),
            submit_s: num(cols[1], "submit_time", MAX_TRACE_SECONDS, false)?,
            duration_s: num(cols[2], "duration", MAX_TRACE_SECONDS, false)?,
            gpus: num(cols[3], "num_gpus", MAX_TRACE_GPUS, true)?,
            tenant,
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header of the bundled traces.
    const H: &str = "job_id,submit_time,duration,num_gpus,user,group,status,num_nodes";

    #[test]
    fn a_file_without_the_header_is_refused_not_read_from_its_second_line() {
        // Without the check, the first job would be taken for the header and lost.
        let err = parse_replay("he1,0,84,1,u001,,Pass,1\nhe2,5,84,1,u001,,Pass,1\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(
            err.what.contains("expected the header job_id,submit_time"),
            "{}",
            err.what
        );
        assert!(parse_replay("").is_err());
        // Spaces around names, quoted names, a byte-order mark, CRLF line ends and extra
        // columns are fine.
        let jobs = parse_replay("job_id, submit_time ,duration,num_gpus\nx,0,1,1,u,g\n").unwrap();
        assert_eq!(jobs.len(), 1);
        let exported = "\u{feff}\"Job_ID\",\"submit_time\",\"duration\",\"num_gpus\",user,group\r\n\
                        x,0,1,1,u,g\r\ny,2,1,1,u,g\r\n";
        assert_eq!(parse_replay(exported).unwrap().len(), 2);
    }

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
        assert!(parse_replay(&format!("{H}\nx,notanumber,1,1,u,g\n")).is_err());
        // A fraction of a second is dropped.
        assert_eq!(
            parse_replay(&format!("{H}\nx,1.9,2.5,1,u,g\n")).unwrap()[0].submit_s,
            1
        );
    }

    #[test]
    fn values_that_would_change_the_workload_are_refused_by_line() {
        let bad = [
            ("x,nan,1,1,u,g", "submit_time must be a number from 0"),
            ("x,inf,1,1,u,g", "submit_time must be a number from 0"),
            ("x,1e20,1,1,u,g", "submit_time must be a number from 0"),
            ("x,-5,1,1,u,g", "submit_time must be a number from 0"),
            ("x,1,1,0.5,u,g", "num_gpus must be a whole number"),
            ("x,1,NaN,1,u,g", "duration must be a number from 0"),
            (",1,1,1,u,g", "job_id is empty"),
            ("\"x,1\",2,1,1,u,g", "quoted fields are not read"),
            ("x,1,1,1,\"u\",g", "quoted fields are not read"),
        ];
        for (row, expected) in bad {
            let err = parse_replay(&format!("{H}\nok,0,1,1,u,g\n{row}\n")).unwrap_err();
            assert_eq!(err.line, 3, "{row}");
            assert!(err.what.contains(expected), "{row}: {}", err.what);
        }
        let err =
            parse_replay(&format!("{H}\na,0,1,1,u,g\nb,0,1,1,u,g\na,5,1,1,u,g\n")).unwrap_err();
        assert_eq!(
            (err.line, err.what.as_str()),
            (4, "job_id \"a\" appears twice")
        );
    }
}
