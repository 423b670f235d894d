//! Cutting the control channel's bytes into lines of at most [`MAX_LINE`] bytes.
//!
//! A line counts only once its `\n` arrived: a partial line at end of input is dropped,
//! so a truncated `register 123456` never runs as `register 12`. A line that grows past
//! the bound is reported once, as soon as it does, and everything up to its `\n` is
//! thrown away, so memory stays bounded whatever the peer sends.

use super::MAX_LINE;

/// One unit of input for the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its `\n`.
    Line(Vec<u8>),
    /// A line longer than [`MAX_LINE`]; its bytes are being discarded.
    TooLong,
}

#[derive(Debug, Default)]
pub struct LineFramer {
    buf: Vec<u8>,
    /// Inside an oversized line: drop bytes up to the next `\n`.
    discarding: bool,
}

impl LineFramer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes read from the channel; completed frames are appended to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Frame>) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (chunk, rest, ends_line) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if self.discarding {
                self.discarding = !ends_line;
                continue;
            }
            if self.buf.len() + chunk.len() > MAX_LINE {
                self.buf.clear();
                out.push(Frame::TooLong);
                self.discarding = !ends_line;
                continue;
            }
            self.buf.extend_from_slice(chunk);
            if ends_line {
                out.push(Frame::Line(std::mem::take(&mut self.buf)));
            }
        }
    }

    /// Bytes of an unfinished line held now (at most [`MAX_LINE`]).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// True while the rest of an oversized line is being thrown away.
    pub fn discarding(&self) -> bool {
        self.discarding
    }

    /// True when nothing of an unfinished line is held or being skipped.
    pub fn at_line_start(&self) -> bool {
        self.buf.is_empty() && !self.discarding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut f = LineFramer::new();
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, &mut out);
        }
        out
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        assert_eq!(
            frames(&[b"regi", b"ster 12\nunreg", b"ister 12\n"]),
            vec![
                Frame::Line(b"register 12".to_vec()),
                Frame::Line(b"unregister 12".to_vec())
            ]
        );
    }

    #[test]
    fn a_partial_last_line_is_never_a_frame() {
        assert_eq!(frames(&[b"register 123456"]), vec![]);
    }

    #[test]
    fn exactly_max_line_is_accepted_one_more_is_not() {
        let ok = vec![b'a'; MAX_LINE];
        let mut input = ok.clone();
        input.push(b'\n');
        assert_eq!(frames(&[&input]), vec![Frame::Line(ok)]);
        let mut long = vec![b'a'; MAX_LINE + 1];
        long.extend_from_slice(b"\nregister 5\n");
        assert_eq!(
            frames(&[&long]),
            vec![Frame::TooLong, Frame::Line(b"register 5".to_vec())]
        );
    }

    #[test]
    fn an_oversized_line_is_reported_once_and_its_tail_skipped() {
        let big = vec![b'x'; 40_000];
        let out = frames(&[&big, &big, &big, b"tail\nlist\n"]);
        assert_eq!(out, vec![Frame::TooLong, Frame::Line(b"list".to_vec())]);
    }

    proptest::proptest! {
        #[test]
        fn chunking_never_changes_the_frames(
            data in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(b'\n'), proptest::num::u8::ANY], 0..2000),
            cut in 0usize..2000,
        ) {
            let cut = cut.min(data.len());
            let whole = frames(&[&data]);
            let split = frames(&[&data[..cut], &data[cut..]]);
            proptest::prop_assert_eq!(whole, split);
        }
    }
}
