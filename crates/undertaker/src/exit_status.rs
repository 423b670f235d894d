//! The one rule for the status undertaker exits with when CMD ends: its exit code, or
//! 128 + the number of the signal that ended it, as a shell reports it.

/// A shell's status for a process that exited with `exit_code` or was ended by `signal`;
/// `None` when neither is known.
pub(crate) fn shell_status(exit_code: Option<i32>, signal: Option<i32>) -> Option<i32> {
    exit_code.map(exited_with).or_else(|| signal.map(killed_by))
}

/// A shell's status for a process that exited with `code` (only its low byte counts).
pub(crate) fn exited_with(code: i32) -> i32 {
    code & 0xff
}

/// A shell's status for a process ended by `signal`.
pub(crate) fn killed_by(signal: i32) -> i32 {
    128 + signal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_pass_through_and_signals_add_128() {
        assert_eq!(shell_status(Some(3), None), Some(3));
        assert_eq!(shell_status(Some(256 + 7), None), Some(7));
        assert_eq!(shell_status(None, Some(9)), Some(137));
        assert_eq!(shell_status(None, None), None);
        assert_eq!(killed_by(15), 143);
    }
}
