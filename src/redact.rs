//! Secrets never shown: what stands in a command line for a secret it held, so that nothing
//! ringload prints or writes (an error, a sweep's files, MLPerf's results tree) carries a key.

/// What stands in a command line shown or recorded for a secret it held.
pub const REDACTED: &str = "<redacted>";

/// A command line as it may be shown or recorded: the value of `--secret-key` and of an
/// override of a secret setting (`…secret_access_key=`, `…session_token=`) replaced by
/// [`REDACTED`].
pub fn redacted_command_line(args: impl IntoIterator<Item = String>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut hide_next = false;
    for arg in args {
        if std::mem::take(&mut hide_next) {
            out.push(REDACTED.into());
            continue;
        }
        let secret_override = arg.split_once('=').filter(|(key, _)| {
            let key = key.to_ascii_lowercase();
            key.ends_with("secret_access_key") || key.ends_with("session_token")
        });
        if arg == "--secret-key" {
            hide_next = true;
            out.push(arg);
        } else if arg.starts_with("--secret-key=") {
            out.push(format!("--secret-key={REDACTED}"));
        } else if let Some((key, _)) = secret_override {
            out.push(format!("{key}={REDACTED}"));
        } else {
            out.push(arg);
        }
    }
    out.join(" ")
}
