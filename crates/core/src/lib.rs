//! paddle-launcher's pure core: the words every part shares (`vocabulary`, `exit`, `error`,
//! `loss`, `ledger`), the options (`cli`, `config`), what the batch system says (`batch`), the
//! membership and its ranks (`selector`, `membership`, `network`), the process plan (`plan`,
//! `protocol`), and the machines that decide what a pod does (`attempt_loop`, `lifecycle`,
//! `control`'s coordinator and follower, `verdict`, `progress`, `coordination`, `straggler`,
//! `job_view`). Inputs in, commands out: no socket, no process, no clock, no log line written.
//! This crate's dependencies keep it so — no tokio, kube, nix or tracing — and the shell (the
//! `paddle-launcher` crate) does the I/O.

pub mod attempt_loop;
pub mod batch;
pub mod cli;
pub mod config;
pub mod control;
pub mod coordination;
pub mod error;
pub mod exit;
pub mod job_view;
pub mod ledger;
pub mod lifecycle;
pub mod loss;
pub mod membership;
pub mod network;
pub mod plan;
pub mod progress;
pub mod protocol;
pub mod selector;
pub mod straggler;
pub mod verdict;
pub mod vocabulary;
