//! `quota man`: the man page (roff) from the command-line definitions, plus
//! the sections clap cannot know: the exit codes a timer or a script acts
//! on, the files and environment, and where the configuration is described.

use clap::CommandFactory;

use super::table::emit;
use crate::cli::Cli;
use crate::error::exit;
use crate::{Error, Result};

pub fn execute() -> Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|source| Error::Process {
            what: "render the man page",
            source,
        })?;
    let mut page = String::from_utf8_lossy(&out).into_owned();
    page.push_str(&extra_sections());
    emit(&page)
}

/// EXIT STATUS, ENVIRONMENT, FILES and CONFIGURATION, in roff.
fn extra_sections() -> String {
    let codes = [
        (exit::OK, "every requested job finished its work"),
        (
            exit::STOPPED,
            "stopped early but cleanly: the quota said no, the upstream reported its quota spent, \
             another run holds the lock, a pool's log was lost, or a stop signal arrived; the next \
             tick resumes (the systemd unit counts it as success)",
        ),
        (
            exit::CONFIG,
            "configuration error: the message names the file, the field and what is wrong; nothing was charged",
        ),
        (
            exit::UNAVAILABLE,
            "the store is unreachable (or refuses us) and an endpoint's policy is fail_closed",
        ),
        (
            exit::FAILURE,
            "anything else, e.g. an upstream error that outlasted the retries",
        ),
        (exit::USAGE, "command-line usage error"),
    ];
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in codes {
        s.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff_text(meaning)));
    }
    s.push_str(
        ".SH ENVIRONMENT\n\
         .TP\n\\fBQUOTA_CONFIG\\fR\nthe configuration file, when \\-c is not given (else ./quota.yaml)\n\
         .TP\n\\fBQUOTA_STORE\\fR\nthe store, when \\-\\-store is not given (else the file's store:, else the embedded store)\n\
         .TP\n\\fBSTATE_DIRECTORY\\fR, \\fBXDG_STATE_HOME\\fR\nwhere the embedded store and this host's history live\n\
         .TP\n\\fBRUST_LOG\\fR\nthe log filter, over \\-v and \\-q\n\
         .SH FILES\n\
         .TP\n\\fB$STATE_DIRECTORY/ledger.sqlite3\\fR, else \\fB~/.local/state/quota/ledger.sqlite3\\fR\n\
         the embedded store, with history.json beside it\n\
         .SH CONFIGURATION\n\
         One YAML file: store:, credentials: (secret, upstream_reset, pools of sliding windows \
         { limit, per, headroom }), endpoints: (cost per pool, on_store_error) and jobs: \
         (credential, regions, steps with request and paginate, output, schedule). \
         Unknown keys and duplicate keys are errors. \
         \\fBquota check\\fR validates a file and prints what it resolved; the README, \
         section Configuration, is the full reference, and jobs/youtube.yaml a complete example.\n",
    );
    s
}

/// Text made safe for roff: backslashes and leading dots or quotes escaped.
fn roff_text(text: &str) -> String {
    let t = text.replace('\\', "\\\\").replace('-', "\\-");
    match t.chars().next() {
        Some('.') | Some('\'') => format!("\\&{t}"),
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_exit_code_and_the_configuration() {
        let s = extra_sections();
        for code in [0, 1, 2, 69, 75, 78] {
            assert!(
                s.contains(&format!("\\fB{code}\\fR\n")),
                "exit {code} missing"
            );
        }
        for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "CONFIGURATION"] {
            assert!(
                s.contains(&format!(".SH {section}")) || s.contains(&format!(".SH \"{section}\""))
            );
        }
        assert_eq!(roff_text(".x-y"), "\\&.x\\-y");
    }
}
