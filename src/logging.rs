//! Logging to stderr with `tracing-subscriber`: the human format on a
//! terminal (colour unless `NO_COLOR`), plain lines without timestamps when
//! stderr is the systemd journal (it stamps lines itself), timestamps under
//! cron, JSON lines with `--log-format json`. `-v`/`-q` set the level unless
//! `RUST_LOG` is given.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;

use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`). Here rather than in the
/// command line's types, so the rooms below the commands that log (the
/// configuration's checks among them) never reach up to `cli`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

pub fn init(format: LogFormat, default_level: &str) {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // HTTP internals may log request URLs, which carry API keys: they stay
    // at info whatever RUST_LOG asks.
    for quiet in [
        "hyper=info",
        "hyper_util=info",
        "reqwest=info",
        "h2=info",
        "rustls=info",
    ] {
        filter = filter.add_directive(quiet.parse().expect("a valid directive"));
    }
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human if stderr_is_journal() => builder.without_time().with_ansi(false).init(),
        LogFormat::Human => builder.with_ansi(colour_on_stderr()).init(),
    }
}

/// Colour only on a terminal, and never with `NO_COLOR` set (no-color.org).
pub fn colour_on_stderr() -> bool {
    std::io::stderr().is_terminal() && no_color_unset()
}

pub fn no_color_unset() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// systemd sets `JOURNAL_STREAM=DEV:INODE` for the stream it connects to
/// stdout/stderr; it is ours only if it matches stderr itself.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let value = value.to_string_lossy();
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    match std::fs::metadata("/proc/self/fd/2") {
        Ok(m) => dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino()),
        Err(_) => false,
    }
}

/// `text` from elsewhere (an upstream's body, a token) made safe to show on
/// a terminal: line breaks and tabs become spaces, and every other control
/// character and each bidirectional control (U+202E RIGHT-TO-LEFT OVERRIDE
/// and its kind, which reorder what follows them on screen) is written as
/// Rust writes it, `\u{202e}`. An upstream can then neither move the
/// cursor, recolour the terminal nor make a line read backwards.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if is_hidden(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A character a terminal acts on rather than shows as itself: a control
/// character or a bidirectional control.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}'
        )
}

/// `text` cut to at most `max` characters, `…` marking a cut: a token or
/// a URL of megabytes would make a log line useless. What comes from an
/// upstream is shown through here, so its control and bidirectional
/// characters are escaped ([`printable`]).
pub(crate) fn cut(text: &str, max: usize) -> String {
    let mut s: String = text.chars().take(max).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    printable(&s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(printable("plain café ✓"), "plain café ✓");
        assert_eq!(
            printable("a\u{202e}b\u{2066}c\u{200f}\x1b[31md\u{7}e\u{9b}"),
            "a\\u{202e}b\\u{2066}c\\u{200f}\\u{1b}[31md\\u{7}e\\u{9b}"
        );
        assert_eq!(printable("line\nbreak\ttab"), "line break tab");
    }
}
