//! paddle-launcher: environment -> peers -> ranks -> process plan -> supervised processes.
//!
//! Everything up to the process plan (`config`, `selector`, `membership`, `protocol`, `plan`)
//! is pure and unit-tested without a cluster; `peers`, `workspace`, `supervise` and `local`
//! are the thin I/O shell around it.

pub mod cli;
pub mod config;
pub mod doctor;
pub mod exit;
pub mod launch;
pub mod local;
pub mod manifest;
pub mod membership;
pub mod peers;
pub mod plan;
pub mod protocol;
pub mod selector;
pub mod supervise;
pub mod workspace;
