//! What operators and deployments use: the worker and tenure-ctl, admin, metrics, alerts, deploy files.
//!
//! One test binary per topic (`cargo test --test operations`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`admin`] | the admin endpoint |
//! | [`alerts`] | the alert rules (promtool) |
//! | [`bootstrap`] | scripts/bootstrap.sh |
//! | [`ctl`] | tenure-ctl against worker processes |
//! | [`command_lines`] | command lines other tools script against |
//! | [`deploy`] | the deployment files |
//! | [`founding_procs`] | founding a group of worker processes |
//! | [`local_group_summary`] | local_group's summary of worker events |
//! | [`metrics`] | the metrics endpoint |
//! | [`metrics_limits`] | the metrics endpoint's limits |
//! | [`metrics_emfile`] | the metrics endpoint out of file descriptors (a child process of this binary) |
//! | [`settlement`] | fenced settlement by worker processes |
//! | `logging` | the tracing feature (with --features tracing) |

mod admin;
mod alerts;
mod bootstrap;
mod command_lines;
mod ctl;
mod deploy;
mod founding_procs;
mod local_group_summary;
#[cfg(feature = "tracing")]
mod logging;
mod metrics;
mod metrics_emfile;
mod metrics_limits;
mod settlement;
