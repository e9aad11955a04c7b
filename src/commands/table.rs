//! Plain-text output helpers shared by the reports: aligned columns, colour
//! that is only used on a terminal, and writing to a stdout that may be a closed pipe (`portion status | head`).

use std::io::Write;

/// Columns aligned on their widths; the first row is the header; columns
/// of whole numbers are right-aligned.
#[derive(Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self, indent: &str) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width = |c: usize| {
            self.rows
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..cols).map(width).collect();
        // A column of whole numbers (below its header) is right-aligned, header included.
        let numeric: Vec<bool> = (0..cols)
            .map(|c| {
                let mut cells = self.rows.iter().skip(1).filter_map(|r| r.get(c)).peekable();
                cells.peek().is_some()
                    && cells.all(|s| !s.is_empty() && s.chars().all(|ch| ch.is_ascii_digit()))
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = indent.to_string();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c > 0 {
                    line.push_str("  ");
                }
                if numeric[c] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if c + 1 < row.len() {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// ANSI styling, or nothing when colour is off.
#[derive(Clone, Copy)]
pub struct Paint {
    pub on: bool,
}

impl Paint {
    fn wrap(self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn bold(self, s: &str) -> String {
        self.wrap("1", s)
    }
    pub fn red(self, s: &str) -> String {
        self.wrap("31", s)
    }
    pub fn yellow(self, s: &str) -> String {
        self.wrap("33", s)
    }
    pub fn green(self, s: &str) -> String {
        self.wrap("32", s)
    }
    pub fn dim(self, s: &str) -> String {
        self.wrap("2", s)
    }
}

/// A bar of block characters, one per value, scaled to the largest (a
/// blank for zero, so an empty stretch reads as empty).
pub fn sparkline(values: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| {
            if v == 0 || max == 0 {
                ' '
            } else {
                let i = (v * 8).div_ceil(max).clamp(1, 8) as usize - 1;
                BLOCKS[i]
            }
        })
        .collect()
}

/// Write `text` to stdout; a reader that went away (`| head`) is not an error.
pub fn emit(text: &str) -> crate::Result<crate::ExitStatus> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(crate::ExitStatus::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(crate::ExitStatus::OK),
        Err(source) => Err(crate::Error::Process {
            what: "write to stdout",
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let mut t = Table::default();
        t.row(vec!["pool".into(), "used".into()]);
        t.row(vec!["units".into(), "1200".into()]);
        t.row(vec!["s".into(), "5".into()]);
        assert_eq!(t.render(""), "pool   used\nunits  1200\ns         5\n");
        let mut t = Table::default();
        t.row(vec!["window".into(), "n".into()]);
        t.row(vec!["1h".into(), "7".into()]);
        assert_eq!(t.render(""), "window  n\n1h      7\n");
    }

    #[test]
    fn sparkline_scales_to_the_largest_bucket() {
        assert_eq!(sparkline(&[0, 1, 4, 8]), " ▁▄█");
        assert_eq!(sparkline(&[0, 0]), "  ");
    }
}
