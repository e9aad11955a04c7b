//! Print a ledger script as Redis receives it (the prelude of the layout's
//! constants and shared helpers, then its body; `lua/charge.lua` with its
//! parts), for the benchmarks in `bench/` that load it with `redis-cli`.
//!
//!     cargo run -q --example lua_script -- charge

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "charge".into());
    match portion::ledger::script_source(&name) {
        Some(source) => print!("{source}"),
        None => {
            eprintln!(
                "no script named '{name}' (charge, block, read, read_log, settle, lock, unblock)"
            );
            std::process::exit(2);
        }
    }
}
