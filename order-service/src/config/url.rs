//! [`http_url`]: the check of a URL setting, shared by the settings of several modules.

/// An http(s) URL with a host, checked at start: one that cannot be fetched would fail every
/// call made with it for as long as the service runs.
pub fn http_url(name: &str, raw: &str) -> anyhow::Result<String> {
    match reqwest::Url::parse(raw.trim()) {
        // As given (trimmed): the parsed form would end a bare host with `/`.
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            Ok(raw.trim().to_owned())
        }
        _ => anyhow::bail!("environment variable {name}={raw:?} is not an http(s) URL"),
    }
}
