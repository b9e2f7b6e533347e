//! Text helpers for messages: bounded previews and tails, how a process
//! ended, and the exit code a tool's output names.

/// The first `max` bytes of `text`, cut on a character boundary.
pub fn preview(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `max` bytes of `text`, cut on a character boundary, trimmed.
pub fn tail(text: &str, max: usize) -> &str {
    let text = text.trim();
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// "exited with code N" / "was killed by a signal", for messages.
pub fn describe_exit(exit_code: Option<i32>) -> String {
    match exit_code {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".to_owned(),
    }
}

/// The last exit code a tool's output names (`Exit Code: 3`, `... completed
/// with exit code 3>`): CLIs that report a failing shell command as a
/// successful tool call say it only there.
pub fn exit_code_in(text: &str) -> Option<i64> {
    let lower = text.to_ascii_lowercase();
    let key = "exit code";
    let mut found = None;
    let mut from = 0;
    while let Some(at) = lower[from..].find(key) {
        let rest = lower[from + at + key.len()..].trim_start_matches([':', ' ']);
        let end = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(rest.len(), |(i, _)| i);
        if let Ok(code) = rest[..end].parse::<i64>() {
            found = Some(code);
        }
        from += at + key.len();
    }
    found
}

/// The error of a shell command that exited with `code`: none for 0.
pub fn exit_error(code: Option<i64>) -> Option<String> {
    code.filter(|&code| code != 0)
        .map(|code| format!("command exited with code {code}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_helpers_cut_on_char_boundaries() {
        assert_eq!(preview("héllo", 2), "h");
        assert_eq!(tail("  héllo \n", 4), "llo");
        assert_eq!(describe_exit(Some(2)), "exited with code 2");
        assert_eq!(describe_exit(None), "was killed by a signal");
    }

    #[test]
    fn the_last_exit_code_named_counts() {
        assert_eq!(exit_code_in("Exit Code: 1 ... exit code 3>"), Some(3));
        assert_eq!(exit_code_in("exit code -1"), Some(-1));
        assert_eq!(exit_code_in("exit codes"), None);
        assert_eq!(exit_error(Some(0)), None);
        assert_eq!(
            exit_error(Some(2)).as_deref(),
            Some("command exited with code 2")
        );
    }
}
