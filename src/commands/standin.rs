//! `quota standin`: serve the local stand-in for a metered API.

use crate::Result;
use crate::cli::StandinArgs;
use crate::standin::{self, StandinOptions};

pub async fn run(args: StandinArgs) -> Result<u8> {
    standin::serve(StandinOptions {
        listen: args.listen,
        key: args.key,
        units: args.units,
        search: args.search,
        window: args.window,
        pages: args.pages,
        items: args.items,
        fail_first: args.fail_first,
        answer_429: args.answer_429,
        delay: args.delay,
        log: args.log,
    })
    .await
}
