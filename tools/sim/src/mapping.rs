//! The rules that turn a trace row into a job of this product.
//!
//! Traces record what ran, not what a researcher would declare here, so each declared field
//! comes from a rule. The defaults, each overridable from the command line:
//!
//! - **CPU-only rows** (0 GPUs) are dropped.
//! - **Allocation:** tenants (user, else group) are ranked by the GPU time they asked for,
//!   largest first (ties by name), and dealt round-robin onto the budget tree's allocations in
//!   path order, so every allocation gets tenants and the heaviest tenants are spread out. A
//!   tenant map (`tenant = allocation` lines) overrides this for the tenants it names.
//! - **Unallocated work:** a job is unallocated (minimum runtime 0) when a stable hash of its
//!   trace id falls in the first `unallocated_percent` of 100 buckets (default 15%; the
//!   published rollout saw 18% of delivered time unallocated).
//! - **Debug jobs:** jobs of at most `debug_max_gpus` GPUs (2) that ran at most
//!   `debug_max_duration` (15 min) declare `debug_min_runtime` (15 min) and are not resumable
//!   (interactive work).
//! - **Other jobs:** minimum runtime = their run time, clamped to [1 min, `min_runtime_cap`];
//!   resumable (they checkpoint) unless `resumable` is off. The cap defaults to the checkpoint
//!   interval (30 min): the SPEC defines the minimum runtime as the shortest run that makes
//!   meaningful progress, and with a checkpoint every 30 min that is the first checkpoint. A
//!   longer cap protects work already banked and keeps GPUs lent to it from coming back; see
//!   the README ("Minimum runtimes") for what 2 h did to owed delivery.
//! - **Priority:** 0 (traces carry none).
//! - **Time:** the trace's second 0 is [`EPOCH_MS`]; only rows submitted in
//!   `[skip, skip + span)` are kept, shifted so the first kept second is the epoch.

use std::collections::{BTreeMap, HashMap};

use fairshare_events::headers::content_hash;
use fairshare_model::trace::TraceJob;
use fairshare_preemption::domain::Config as PreemptionConfig;

use crate::engine::duration;
use crate::setup::EPOCH_MS;
use crate::workload::{DEBUG_MAX_GPUS, DEBUG_MAX_MIN_RUNTIME_MS, SimJob};

const MIN: i64 = 60_000;

/// The mapping rules (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingRules {
    /// Per cent of jobs that are unallocated (0-100).
    pub unallocated_percent: u32,
    /// Largest debug job, in GPUs.
    pub debug_max_gpus: u32,
    /// Longest run of a debug job, in ms.
    pub debug_max_duration_ms: i64,
    /// Minimum runtime debug jobs declare, in ms.
    pub debug_min_runtime_ms: i64,
    /// Largest minimum runtime other jobs declare, in ms (default: the preemption contract's
    /// default checkpoint interval).
    pub min_runtime_cap_ms: i64,
    /// Whether non-debug jobs resume from checkpoints after a preemption.
    pub resumable: bool,
    /// Tenant -> allocation overrides.
    pub tenant_map: BTreeMap<String, String>,
    /// Trace seconds skipped at the start.
    pub skip_ms: i64,
    /// Trace time kept after the skip.
    pub span_ms: i64,
}

impl Default for MappingRules {
    fn default() -> Self {
        MappingRules {
            unallocated_percent: 15,
            debug_max_gpus: 2,
            debug_max_duration_ms: 15 * MIN,
            debug_min_runtime_ms: 15 * MIN,
            min_runtime_cap_ms: PreemptionConfig::default().checkpoint_interval_ms,
            resumable: true,
            tenant_map: BTreeMap::new(),
            skip_ms: 0,
            span_ms: i64::MAX,
        }
    }
}

/// Why a tenant map could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantMapError {
    /// A line is not `tenant = allocation`.
    #[error("tenant map line {line}: expected `tenant = allocation`")]
    Syntax {
        /// 1-based line.
        line: usize,
    },
    /// A line names an allocation the budget tree does not have.
    #[error("tenant map line {line}: {allocation:?} is not an allocation of the budget tree")]
    UnknownAllocation {
        /// 1-based line.
        line: usize,
        /// The allocation named.
        allocation: String,
    },
    /// A tenant is named twice: which line holds would be a guess.
    #[error("tenant map line {line}: tenant {tenant:?} is already mapped on line {first}")]
    Repeated {
        /// 1-based line of the second mention.
        line: usize,
        /// The tenant.
        tenant: String,
        /// 1-based line of the first.
        first: usize,
    },
}

/// Parses a tenant map: `tenant = allocation` per line, `#` comments, blank lines ignored.
pub fn parse_tenant_map(
    text: &str,
    allocations: &[String],
) -> Result<BTreeMap<String, String>, TenantMapError> {
    // Each tenant's allocation and the line that named it (for a repeat's error).
    let mut out: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((tenant, allocation)) = line.split_once('=') else {
            return Err(TenantMapError::Syntax { line: i + 1 });
        };
        let (tenant, allocation) = (tenant.trim(), allocation.trim());
        if tenant.is_empty() || allocation.is_empty() {
            return Err(TenantMapError::Syntax { line: i + 1 });
        }
        if !allocations.iter().any(|a| a == allocation) {
            return Err(TenantMapError::UnknownAllocation {
                line: i + 1,
                allocation: allocation.to_owned(),
            });
        }
        if let Some((_, first)) = out.get(tenant) {
            return Err(TenantMapError::Repeated {
                line: i + 1,
                tenant: tenant.to_owned(),
                first: *first,
            });
        }
        out.insert(tenant.to_owned(), (allocation.to_owned(), i + 1));
    }
    Ok(out
        .into_iter()
        .map(|(tenant, (allocation, _))| (tenant, allocation))
        .collect())
}

/// `map` in the form [`parse_tenant_map`] reads, one `tenant = allocation` line per tenant in
/// tenant order, under a comment saying what it is.
pub fn format_tenant_map(map: &BTreeMap<String, String>) -> String {
    let mut out = String::from(
        "# fairshare-sim tenant map: which allocation each tenant's jobs charge.\n\
         # Give it to --tenant-map to replay the same work under another budget.\n",
    );
    for (tenant, allocation) in map {
        out.push_str(&format!("{tenant} = {allocation}\n"));
    }
    out
}

impl MappingRules {
    /// What the rules map that the product would not call what they call it: "debug" jobs
    /// bigger or longer-protected than SPEC section 2's debug job (at most 2 GPUs, at most
    /// 15 min) are scheduled and measured as other allocated work, so the debug wait figures
    /// would leave them out.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.debug_max_gpus > DEBUG_MAX_GPUS {
            out.push(format!(
                "--debug-max-gpus {} is over the product's debug job ({DEBUG_MAX_GPUS} GPUs at \
                 most): the bigger ones count as other allocated work, not debug",
                self.debug_max_gpus
            ));
        }
        if self.debug_min_runtime_ms > DEBUG_MAX_MIN_RUNTIME_MS {
            out.push(format!(
                "--debug-min-runtime {} s is over the product's debug job ({} s at most): \
                 those jobs count as other allocated work, not debug",
                self.debug_min_runtime_ms / 1000,
                DEBUG_MAX_MIN_RUNTIME_MS / 1000
            ));
        }
        // The product calls a job debug by what it declares, not by these rules: other jobs
        // of few GPUs whose run time, clamped to the cap, is a debug job's minimum runtime are
        // debug jobs too (under the allowance, and in the debug waits).
        let narrower = self.debug_max_gpus < DEBUG_MAX_GPUS
            || self.debug_max_duration_ms < DEBUG_MAX_MIN_RUNTIME_MS;
        if narrower || self.min_runtime_cap_ms <= DEBUG_MAX_MIN_RUNTIME_MS {
            out.push(format!(
                "jobs of at most {DEBUG_MAX_GPUS} GPUs declaring at most {} min are debug jobs to \
                 the product whatever --debug-max-gpus and --debug-max-duration say: with \
                 these settings (a minimum-runtime cap of {}) some jobs the rules call \
                 'other' declare that and count as debug",
                DEBUG_MAX_MIN_RUNTIME_MS / MIN,
                duration(self.min_runtime_cap_ms)
            ));
        }
        out
    }

    /// One line per rule, for the report; the tenant rule counts the tenants of the chosen
    /// part of `trace` that the tenant map pins (a line naming no tenant there changes
    /// nothing, so it is not counted).
    pub fn describe(&self, trace: &[TraceJob]) -> Vec<String> {
        // Exact durations, as the jobs declare them (whole seconds): 90 s is not "1 min".
        let declared = |ms: i64| duration(ms - ms % 1000);
        // The cap as `job` applies it: never under the 1 min floor.
        let cap_ms = self.min_runtime_cap_ms.max(MIN);
        let cap_ms = cap_ms - cap_ms % 1000;
        let pinned = self.tenant_map.len() - self.unmatched_tenants(trace).len();
        vec![
            "CPU-only rows dropped".to_owned(),
            match (pinned, self.tenant_map.len()) {
                (0, 0) => {
                    "tenants dealt round-robin onto allocations by GPU time asked, largest first"
                        .to_owned()
                }
                (0, _) => "tenants dealt round-robin onto allocations by GPU time asked, largest \
                           first (the tenant map names none of the replayed tenants)"
                    .to_owned(),
                (n, _) => format!(
                    "tenants dealt round-robin onto allocations by GPU time asked, largest first, \
                     but for the {n} the tenant map names"
                ),
            },
            format!(
                "{}% of jobs unallocated (by hash of the trace id)",
                self.unallocated_percent
            ),
            format!(
                "debug: <= {} GPUs and ran <= {}; declares {}, not resumable",
                self.debug_max_gpus,
                duration(self.debug_max_duration_ms),
                declared(self.debug_min_runtime_ms)
            ),
            format!(
                "others: minimum runtime = run time clamped to {}; {}",
                // Whole minutes as they always read; another cap exactly.
                if cap_ms % MIN == 0 {
                    format!("[1, {}] min", cap_ms / MIN)
                } else {
                    format!("[1 min, {}]", duration(cap_ms))
                },
                if self.resumable {
                    "resumable"
                } else {
                    "not resumable"
                }
            ),
        ]
    }

    /// The jobs of `trace` (sorted by submission) as this product's jobs charging
    /// `allocations`.
    pub fn map(&self, trace: &[TraceJob], allocations: &[String]) -> Vec<SimJob> {
        let kept = self.kept(trace);
        let tenants = self.deal_tenants(&kept, allocations);
        kept.into_iter()
            .filter_map(|t| {
                let allocation = tenants.get(t.tenant.as_str())?.clone();
                Some(self.job(t, allocation))
            })
            .collect()
    }

    /// The GPU rows of `trace` submitted in the chosen part of it.
    fn kept<'t>(&self, trace: &'t [TraceJob]) -> Vec<&'t TraceJob> {
        let end = self.skip_ms.saturating_add(self.span_ms);
        trace
            .iter()
            .filter(|t| t.gpus > 0 && t.duration_s >= 0)
            .filter(|t| {
                let at = t.submit_s.saturating_mul(1000);
                at >= self.skip_ms && at < end
            })
            .collect()
    }

    /// Tenants the tenant map names that no GPU job in the chosen part of `trace` has (a
    /// typo, or a tenant outside `--skip` / `--span`): their lines change nothing.
    pub fn unmatched_tenants(&self, trace: &[TraceJob]) -> Vec<&str> {
        let present: std::collections::HashSet<&str> =
            self.kept(trace).iter().map(|t| t.tenant.as_str()).collect();
        self.tenant_map
            .keys()
            .map(String::as_str)
            .filter(|t| !present.contains(t))
            .collect()
    }

    /// Which allocation each tenant of the chosen part of `trace` charges: the tenant map's
    /// choice, else the round-robin dealing over `allocations`.
    pub fn tenant_allocations(
        &self,
        trace: &[TraceJob],
        allocations: &[String],
    ) -> BTreeMap<String, String> {
        self.deal_tenants(&self.kept(trace), allocations)
            .into_iter()
            .map(|(tenant, allocation)| (tenant.to_owned(), allocation))
            .collect()
    }

    fn deal_tenants<'t>(
        &self,
        jobs: &[&'t TraceJob],
        allocations: &[String],
    ) -> HashMap<&'t str, String> {
        let mut asked: BTreeMap<&str, i128> = BTreeMap::new();
        for t in jobs {
            *asked.entry(t.tenant.as_str()).or_default() +=
                i128::from(t.gpus) * i128::from(t.duration_s);
        }
        let mut ranked: Vec<(&str, i128)> = asked.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut out = HashMap::new();
        // Every tenant takes its turn in the dealing, named by the map or not: a map then moves
        // only the tenants it names, and pinning a tenant to the allocation it was dealt
        // changes nothing (a turn skipped for it would shift every tenant after it).
        for (turn, (tenant, _)) in ranked.into_iter().enumerate() {
            let allocation = match self.tenant_map.get(tenant) {
                Some(a) => a.clone(),
                None if allocations.is_empty() => continue,
                None => allocations[turn % allocations.len()].clone(),
            };
            out.insert(tenant, allocation);
        }
        out
    }

    fn job(&self, t: &TraceJob, allocation: String) -> SimJob {
        let duration_ms = t.duration_s.saturating_mul(1000).max(1000);
        let gpus = u32::try_from(t.gpus).unwrap_or(u32::MAX);
        let unallocated = content_hash(t.id.as_bytes()) % 100 < u64::from(self.unallocated_percent);
        let debug = gpus <= self.debug_max_gpus && duration_ms <= self.debug_max_duration_ms;
        let (min_runtime_ms, resumable) = if unallocated {
            (0, self.resumable)
        } else if debug {
            (self.debug_min_runtime_ms, false)
        } else {
            (
                duration_ms.clamp(MIN, self.min_runtime_cap_ms.max(MIN)),
                self.resumable,
            )
        };
        // Minimum runtimes are declared in whole seconds.
        let min_runtime_ms = min_runtime_ms - min_runtime_ms % 1000;
        SimJob {
            name: t.id.clone(),
            submit_ms: EPOCH_MS + t.submit_s.saturating_mul(1000) - self.skip_ms,
            duration_ms,
            allocation,
            user: t.tenant.clone(),
            gpus,
            min_runtime_ms,
            resumable,
            priority: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_rules_beyond_the_products_debug_job_are_warned_of() {
        assert!(MappingRules::default().warnings().is_empty());
        let wide = MappingRules {
            debug_max_gpus: 4,
            debug_min_runtime_ms: 20 * MIN,
            ..MappingRules::default()
        };
        let w = wide.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("--debug-max-gpus 4"));
        assert!(w[1].contains("--debug-min-runtime 1200 s"));
        // Narrower rules, or a cap within a debug job's minimum runtime, leave jobs the rules
        // call other declaring what makes them debug jobs to the product.
        for narrow in [
            MappingRules {
                debug_max_gpus: 0,
                ..MappingRules::default()
            },
            MappingRules {
                debug_max_duration_ms: 5 * MIN,
                ..MappingRules::default()
            },
            MappingRules {
                min_runtime_cap_ms: 10 * MIN,
                ..MappingRules::default()
            },
        ] {
            let w = narrow.warnings();
            assert!(w.len() == 1 && w[0].contains("count as debug"), "{w:?}");
        }
    }

    use super::*;

    fn row(id: &str, submit_s: i64, duration_s: i64, gpus: i64, tenant: &str) -> TraceJob {
        TraceJob {
            id: id.into(),
            submit_s,
            duration_s,
            gpus,
            tenant: tenant.into(),
        }
    }

    fn allocs() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn tenants_are_dealt_by_demand_and_overridable() {
        let trace = vec![
            row("1", 0, 100, 1, "small"),
            row("2", 0, 100, 8, "big"),
            row("3", 0, 100, 4, "mid"),
            row("4", 0, 100, 0, "cpu"),
        ];
        let rules = MappingRules {
            unallocated_percent: 0,
            ..MappingRules::default()
        };
        let jobs = rules.map(&trace, &allocs());
        let by: BTreeMap<_, _> = jobs
            .iter()
            .map(|j| (j.user.as_str(), j.allocation.as_str()))
            .collect();
        assert_eq!(by.get("big"), Some(&"a"));
        assert_eq!(by.get("mid"), Some(&"b"));
        assert_eq!(by.get("small"), Some(&"a"));
        assert!(!by.contains_key("cpu"), "CPU-only rows are dropped");

        let rules = MappingRules {
            tenant_map: parse_tenant_map("big = b # heavy\n\n", &allocs()).unwrap(),
            unallocated_percent: 0,
            ..MappingRules::default()
        };
        let jobs = rules.map(&trace, &allocs());
        assert_eq!(
            jobs.iter().find(|j| j.user == "big").unwrap().allocation,
            "b"
        );
        assert!(rules.unmatched_tenants(&trace).is_empty());
    }

    /// A partial tenant map moves only the tenants it names: pinning a tenant to the
    /// allocation it was dealt changes no one's, and pinning it elsewhere moves it alone.
    #[test]
    fn a_partial_tenant_map_moves_only_the_tenants_it_names() {
        let trace: Vec<_> = ["t1", "t2", "t3", "t4", "t5", "t6", "t7"]
            .iter()
            .zip(1..)
            .map(|(tenant, n)| row(tenant, 0, 100, 8 - n, tenant))
            .collect();
        let allocations: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let dealt = MappingRules::default().tenant_allocations(&trace, &allocations);
        assert_eq!(dealt.len(), 7);
        for (pinned, to) in [("t1", "a"), ("t2", "b"), ("t4", "c"), ("t2", "a")] {
            let rules = MappingRules {
                tenant_map: parse_tenant_map(&format!("{pinned} = {to}\n"), &allocations).unwrap(),
                ..MappingRules::default()
            };
            let mut expected = dealt.clone();
            expected.insert(pinned.to_owned(), to.to_owned());
            assert_eq!(
                rules.tenant_allocations(&trace, &allocations),
                expected,
                "{pinned} = {to}"
            );
        }
    }

    /// The report's rules give durations as the jobs declare them, not rounded to minutes,
    /// and the defaults as they always read.
    #[test]
    fn the_rules_print_exact_durations() {
        let rules = MappingRules::default().describe(&[]);
        assert_eq!(
            rules[3],
            "debug: <= 2 GPUs and ran <= 15 min; declares 15 min, not resumable"
        );
        assert_eq!(
            rules[4],
            "others: minimum runtime = run time clamped to [1, 30] min; resumable"
        );
        let short = MappingRules {
            debug_min_runtime_ms: 30_000,
            debug_max_duration_ms: 90_000,
            min_runtime_cap_ms: 150_000,
            ..MappingRules::default()
        };
        let rules = short.describe(&[]);
        assert_eq!(
            rules[3],
            "debug: <= 2 GPUs and ran <= 90 s; declares 30 s, not resumable"
        );
        assert_eq!(
            rules[4],
            "others: minimum runtime = run time clamped to [1 min, 150 s]; resumable"
        );
        // Declared in whole seconds, as `job` declares them; a cap under the 1 min floor
        // is that floor.
        let odd = MappingRules {
            debug_min_runtime_ms: 1_500,
            min_runtime_cap_ms: 30_000,
            ..MappingRules::default()
        };
        let rules = odd.describe(&[]);
        assert!(
            rules[3].ends_with("declares 1 s, not resumable"),
            "{}",
            rules[3]
        );
        assert!(rules[4].contains("[1, 1] min"), "{}", rules[4]);
        let w = MappingRules {
            min_runtime_cap_ms: 150_000,
            ..MappingRules::default()
        }
        .warnings();
        assert!(w[0].contains("a minimum-runtime cap of 150 s"), "{w:?}");
    }

    /// The report's tenant rule counts the tenants the map pins, not its lines: a line that
    /// names no tenant of the replayed span pins nobody.
    #[test]
    fn the_tenant_rule_counts_the_tenants_pinned() {
        let trace = vec![row("1", 0, 100, 1, "small"), row("2", 0, 100, 2, "big")];
        let rule = |map: &str| {
            MappingRules {
                tenant_map: parse_tenant_map(map, &allocs()).unwrap(),
                ..MappingRules::default()
            }
            .describe(&trace)[1]
                .clone()
        };
        assert!(
            rule("nobody = a\nsmall = b\n").ends_with("but for the 1 the tenant map names"),
            "{}",
            rule("nobody = a\nsmall = b\n")
        );
        let none = rule("nobody = a\nSMALL = b\n");
        assert!(!none.contains("but for the"), "{none}");
        assert!(
            none.contains("names none of the replayed tenants"),
            "{none}"
        );
        assert_eq!(
            rule(""),
            "tenants dealt round-robin onto allocations by GPU time asked, largest first"
        );
    }

    /// A tenant-map line naming a tenant with no GPU job in the chosen part of the trace (a
    /// typo, a CPU-only tenant, one outside the span) is reported, not silently unused.
    #[test]
    fn tenant_map_lines_that_match_no_job_are_named() {
        let trace = vec![
            row("1", 0, 100, 1, "small"),
            row("2", 0, 100, 0, "cpu"),
            row("3", 7_200, 100, 2, "late"),
        ];
        let rules = MappingRules {
            tenant_map: parse_tenant_map("smal = a\ncpu = b\nlate = a\nsmall = b\n", &allocs())
                .unwrap(),
            span_ms: 3_600_000,
            ..MappingRules::default()
        };
        assert_eq!(rules.unmatched_tenants(&trace), vec!["cpu", "late", "smal"]);
    }

    #[test]
    fn declared_fields_follow_the_rules() {
        let rules = MappingRules {
            unallocated_percent: 0,
            ..MappingRules::default()
        };
        let trace = vec![
            row("d", 10, 600, 2, "u"),
            row("s", 20, 30, 4, "u"),
            row("l", 30, 90_000, 8, "u"),
        ];
        let jobs = rules.map(&trace, &allocs());
        assert_eq!(jobs[0].min_runtime_ms, 15 * MIN);
        assert!(!jobs[0].resumable);
        assert_eq!(jobs[0].submit_ms, EPOCH_MS + 10_000);
        assert_eq!(
            jobs[1].min_runtime_ms, MIN,
            "short non-debug jobs get the 1 min floor"
        );
        assert_eq!(
            jobs[2].min_runtime_ms,
            30 * MIN,
            "long jobs declare the checkpoint interval"
        );
        assert!(jobs[2].resumable);

        let all = MappingRules {
            unallocated_percent: 100,
            ..MappingRules::default()
        };
        assert!(
            all.map(&trace, &allocs())
                .iter()
                .all(|j| j.min_runtime_ms == 0)
        );
    }

    #[test]
    fn unallocated_share_is_near_its_percentage() {
        let trace: Vec<_> = (0..2000)
            .map(|i| row(&format!("job{i}"), i, 3600, 1, "u"))
            .collect();
        let jobs = MappingRules::default().map(&trace, &allocs());
        let free = jobs.iter().filter(|j| j.min_runtime_ms == 0).count();
        assert!((240..=360).contains(&free), "{free} of 2000 unallocated");
    }

    #[test]
    fn window_of_the_trace() {
        let rules = MappingRules {
            skip_ms: 100_000,
            span_ms: 50_000,
            ..MappingRules::default()
        };
        let trace = vec![
            row("a", 99, 1, 1, "u"),
            row("b", 100, 1, 1, "u"),
            row("c", 150, 1, 1, "u"),
        ];
        let jobs = rules.map(&trace, &allocs());
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].submit_ms, EPOCH_MS);
    }

    #[test]
    fn tenant_map_errors_are_specific() {
        assert_eq!(
            parse_tenant_map("x\n", &allocs()),
            Err(TenantMapError::Syntax { line: 1 })
        );
        assert!(matches!(
            parse_tenant_map("u = nope\n", &allocs()),
            Err(TenantMapError::UnknownAllocation { line: 1, .. })
        ));
        // A tenant named twice: which line would hold is a guess, so neither does.
        let a = &allocs()[0];
        assert_eq!(
            parse_tenant_map(&format!("u = {a}\n# c\nu = {a}\n"), &allocs()),
            Err(TenantMapError::Repeated {
                line: 3,
                tenant: "u".into(),
                first: 1
            })
        );
    }

    #[test]
    fn a_written_tenant_map_reads_back_as_the_same_dealing() {
        let allocations = allocs();
        let mut map = BTreeMap::new();
        map.insert("u001".to_owned(), allocations[0].clone());
        map.insert("cluster07".to_owned(), allocations[1].clone());
        let text = format_tenant_map(&map);
        assert!(text.starts_with("# fairshare-sim tenant map"));
        assert_eq!(parse_tenant_map(&text, &allocations), Ok(map));
    }
}
