//! The integration tests, built as one binary (`[[test]] name = "lib"` in
//! Cargo.toml) so the fixtures in `common` compile once and the tests link
//! once: one module per area, run one with `cargo test --test lib drills::`.

mod common;

mod bench;
mod cli_charge;
mod cli_shares;
mod config_bounds;
mod contrib;
mod drills;
mod inputs_config;
mod inputs_progress;
mod ledger_concurrency;
mod ledger_conformance;
mod ledger_embedded_burst;
mod ledger_embedded_scale;
mod ledger_equivalence;
mod ledger_fast_path;
mod ledger_metered;
mod ledger_redis;
mod ledger_redis_segments;
mod ledger_shares;
mod ledger_shares_scale;
mod operator;
mod operator_metrics;
mod run_answers;
mod run_blocks;
mod run_concurrency;
mod run_concurrency_within;
mod run_conditional;
mod run_conditional_lost;
mod run_config;
mod run_examples;
mod run_fan_out;
mod run_fan_out_parallel;
mod run_files;
mod run_inputs;
mod run_inputs_batch;
mod run_inputs_failed;
mod run_inputs_hostile;
mod run_inputs_scale;
mod run_inputs_warnings;
mod run_jobs;
mod run_page_reading;
mod run_pagination;
mod run_requests;
mod run_requests_urls;
mod run_secrets;
mod run_settle;
mod run_shares;
mod run_sqlite;
mod run_sqlite_files;
mod run_sqlite_guards;
mod run_stops;
mod run_topologies;
mod secret_loading;
