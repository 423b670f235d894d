//! Human output that cannot be forged: labels, process names and paths come from
//! whoever started a tree, so control characters are escaped before they reach a
//! terminal (JSON output escapes them itself), and table cells are bounded.

/// Longest cell a table shows, in characters; longer ones end in "…".
const MAX_CELL: usize = 80;

/// True for characters that move the cursor, redraw the screen or reorder text:
/// C0/C1 controls and DEL, and the Unicode bidirectional and line/paragraph marks.
fn hostile(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every hostile character written as a Rust escape (`\n`, `\u{1b}`).
pub fn line(s: &str) -> String {
    if !s.chars().any(hostile) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hostile(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// [`line`], cut to [`MAX_CELL`] characters.
pub fn cell(s: &str) -> String {
    let escaped = line(s);
    if escaped.chars().count() <= MAX_CELL {
        return escaped;
    }
    let mut out: String = escaped.chars().take(MAX_CELL - 1).collect();
    out.push('…');
    out
}

/// Left-aligned columns, two spaces apart; every cell passes through [`cell`].
/// Padding is written by hand: a width argument to `format!` is limited to u16.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    // The whole table in one write (stdout is line-buffered: a line per write was
    // 1 000 system calls for `ps` of 1 000 trees).
    let mut table = String::new();
    let mut print = |cells: &[String]| {
        let mut line = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            line.push_str(c);
            if i + 1 < cells.len() {
                let pad = w.saturating_sub(c.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    };
    print(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    for r in &rows {
        print(r);
    }
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(table.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        assert_eq!(line("plain label"), "plain label");
        assert_eq!(line("a\nb\rc\x1b[2J"), "a\\nb\\rc\\u{1b}[2J");
        assert_eq!(line("\u{9b}x\u{202e}"), "\\u{9b}x\\u{202e}");
        assert_eq!(line("tab\there"), "tab\\there");
    }

    #[test]
    fn cells_are_bounded() {
        assert_eq!(cell(&"x".repeat(65_536)).chars().count(), MAX_CELL);
        assert!(cell(&"x".repeat(200)).ends_with('…'));
        assert_eq!(cell("short"), "short");
    }

    proptest::proptest! {
        #[test]
        fn nothing_hostile_survives(s in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}\\u{2028}\\u{202e}a]*") {
            proptest::prop_assert!(!cell(&s).chars().any(hostile));
        }
    }
}
