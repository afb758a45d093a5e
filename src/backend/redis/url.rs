//! The URL forms [`RedisBackend::builder`](super::RedisBackend::builder)
//! accepts, and what each means:
//!
//! | URL | topology |
//! |---|---|
//! | `redis://[user:password@]host:port[/db]`, `rediss://…` | one server (TLS with `rediss`) |
//! | `redis+cluster://[user:password@]host:port,host:port`, `rediss+cluster://…`, or a comma-separated list of `redis://` URLs | Redis Cluster (feature `redis-cluster`): the nodes to learn the cluster from |
//! | `redis+sentinel://[user:password@]host:port,host:port/master-name[/db]`, `rediss+sentinel://…` | the master that Redis Sentinel names (feature `redis-sentinel`); the credentials and TLS are the master's and the sentinels' alike |

/// Where the URL says Redis is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel(SentinelUrl),
}

/// A `redis+sentinel://` URL, taken apart.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    pub(super) tls: bool,
    pub(super) sentinels: Vec<(String, u16)>,
    pub(super) master: String,
    pub(super) db: i64,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("tls", &self.tls)
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(feature = "redis-sentinel")]
impl SentinelUrl {
    /// The URL of a server: a sentinel, or the master (with the database).
    pub(super) fn url_of(&self, host: &str, port: u16, master: bool) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let credentials = match (&self.username, &self.password) {
            (Some(user), Some(password)) => format!("{}:{}@", encode(user), encode(password)),
            (None, Some(password)) => format!(":{}@", encode(password)),
            (Some(user), None) => format!("{}@", encode(user)),
            (None, None) => String::new(),
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let db = if master {
            format!("/{}", self.db)
        } else {
            String::new()
        };
        format!("{scheme}://{credentials}{host}:{port}{db}")
    }
}

/// Percent-encoding of everything but unreserved characters.
#[cfg(feature = "redis-sentinel")]
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What `url` names, or what is wrong with it.
pub(super) fn parse(url: &str) -> Result<Target, String> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{}: not a Redis URL (redis://host:port)", redacted(url)))?;
    match scheme {
        "redis+cluster" | "rediss+cluster" => {
            let plain = if scheme == "redis+cluster" {
                "redis"
            } else {
                "rediss"
            };
            let (credentials, hosts) = split_credentials(rest);
            let hosts = hosts.split('/').next().unwrap_or_default();
            let nodes: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| match credentials {
                    Some(c) => format!("{plain}://{c}@{h}"),
                    None => format!("{plain}://{h}"),
                })
                .collect();
            if nodes.is_empty() {
                return Err("redis+cluster://: no node is named".into());
            }
            Ok(Target::Cluster(nodes))
        }
        "redis+sentinel" | "rediss+sentinel" => sentinel(scheme == "rediss+sentinel", rest),
        "redis" | "rediss" if url.contains(',') => Ok(Target::Cluster(
            url.split(',').map(|u| u.trim().to_owned()).collect(),
        )),
        _ => Ok(Target::Standalone(url.to_owned())),
    }
}

fn sentinel(tls: bool, rest: &str) -> Result<Target, String> {
    let (credentials, rest) = split_credentials(rest);
    let (hosts, path) = rest
        .split_once('/')
        .ok_or("redis+sentinel://: the master's name is missing (…/mymaster)")?;
    let mut path = path.split('/');
    let master = decode(path.next().unwrap_or_default());
    if master.is_empty() {
        return Err("redis+sentinel://: the master's name is missing (…/mymaster)".into());
    }
    let db = match path.next().filter(|d| !d.is_empty()) {
        Some(db) => db
            .parse()
            .map_err(|_| format!("redis+sentinel://: {db:?} is not a database number"))?,
        None => 0,
    };
    let sentinels = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            let (host, port) = h.rsplit_once(':').unwrap_or((h, "26379"));
            let port = port
                .parse()
                .map_err(|_| format!("redis+sentinel://: {h:?} has no valid port"))?;
            Ok((host.trim_matches(['[', ']']).to_owned(), port))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if sentinels.is_empty() {
        return Err("redis+sentinel://: no sentinel is named".into());
    }
    let (username, password) = match credentials {
        None => (None, None),
        Some(c) => match c.split_once(':') {
            Some((user, password)) => (
                Some(decode(user)).filter(|u| !u.is_empty()),
                Some(decode(password)),
            ),
            None => (Some(decode(c)), None),
        },
    };
    Ok(Target::Sentinel(SentinelUrl {
        tls,
        sentinels,
        master,
        db,
        username,
        password,
    }))
}

/// `user:password` (if any) and what follows the `@`.
fn split_credentials(rest: &str) -> (Option<&str>, &str) {
    let hosts_end = rest.find('/').unwrap_or(rest.len());
    match rest[..hosts_end].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// Percent-decoding, as URLs carry passwords with reserved characters.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` with any password hidden, for error messages.
pub(super) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => match url[start + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..start + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_names_its_topology() {
        assert_eq!(
            parse("redis://h:1").unwrap(),
            Target::Standalone("redis://h:1".into())
        );
        assert_eq!(
            parse("redis+cluster://u:p@a:1,b:2").unwrap(),
            Target::Cluster(vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()])
        );
        assert_eq!(
            parse("redis://a:1, redis://b:2").unwrap(),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        let Target::Sentinel(s) =
            parse("rediss+sentinel://limiter:p%40ss@s1:26379,s2,[::1]:26380/mymaster/2").unwrap()
        else {
            panic!("not sentinel")
        };
        assert!(s.tls);
        assert_eq!(
            s.sentinels,
            [
                ("s1".to_owned(), 26379),
                ("s2".to_owned(), 26379),
                ("::1".to_owned(), 26380)
            ]
        );
        assert_eq!((s.master.as_str(), s.db), ("mymaster", 2));
        assert_eq!(s.username.as_deref(), Some("limiter"));
        assert_eq!(s.password.as_deref(), Some("p@ss"));
        assert!(!format!("{s:?}").contains("p@ss"));
        #[cfg(feature = "redis-sentinel")]
        {
            assert_eq!(
                s.url_of("10.0.0.1", 6379, true),
                "rediss://limiter:p%40ss@10.0.0.1:6379/2"
            );
            assert_eq!(
                s.url_of("::1", 26379, false),
                "rediss://limiter:p%40ss@[::1]:26379"
            );
        }
    }

    #[test]
    fn a_bad_url_says_what_is_missing() {
        for (url, says) in [
            ("redis+sentinel://s1:26379", "master's name"),
            ("redis+sentinel://s1:x/m", "valid port"),
            ("redis+sentinel:///m", "no sentinel"),
            ("redis+sentinel://s1/m/x", "database number"),
            ("h:6379", "not a Redis URL"),
            ("redis+cluster://", "no node"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
        assert_eq!(redacted("redis://u:secret@h:1"), "redis://u:***@h:1");
    }
}
