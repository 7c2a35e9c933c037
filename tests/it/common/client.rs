//! Clients of the proxy: curl, reqwest, raw exchanges, and polling with a deadline.

use super::*;

/// Sends GETs for `urls` (with the paired User-Agent) through the proxy all at once;
/// the statuses, in the order given.
pub async fn concurrent(proxy: &Proxy, urls: Vec<(String, &'static str)>) -> Vec<u16> {
    let client = proxy.client();
    let handles: Vec<_> = urls
        .into_iter()
        .map(|(url, ua)| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .get(url)
                    .header("User-Agent", ua)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for handle in handles {
        statuses.push(handle.await.expect("task").expect("request"));
    }
    statuses
}

/// Runs `curl -s -x PROXY URL`, returning (status, headers, body).
/// The value of the field `name` (any case) in a response head as curl prints it.
pub fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

pub fn curl(proxy: &Proxy, url: &str, extra: &[&str]) -> (u16, String, String) {
    curl_via(&proxy.url(), url, extra)
}

/// Runs `curl -s -x PROXY_URL URL` through any proxy (a robotsgate, or a front before
/// one), returning (status, headers, body).
pub fn curl_via(proxy_url: &str, url: &str, extra: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-D", "-", "-x", proxy_url])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    split_response(&String::from_utf8_lossy(&out.stdout))
}

/// `curl -D -` output as (status, head, body); status 0 when no HTTP answer came.
pub fn split_response(text: &str) -> (u16, String, String) {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// The status of a GET for `url` sent with `client` (which carries the proxy).
pub async fn get_status(client: &reqwest::Client, url: String) -> u16 {
    let response = client.get(&url).send().await;
    response
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .status()
        .as_u16()
}

/// [`raw_exchange`] whose answer must start with status `status` (HTTP/1.1): the answer.
pub async fn raw_status(addr: SocketAddr, request: impl AsRef<[u8]>, status: u16) -> String {
    let reply = raw_exchange(addr, request.as_ref()).await;
    assert!(reply.starts_with(&format!("HTTP/1.1 {status}")), "{reply}");
    reply
}

/// Sends raw bytes to `addr` and returns what comes back before the connection closes
/// (or 5 s pass).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// Polls `check` until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `curl` (a command whose remaining arguments say what to fetch) quietly for the
/// HTTP status alone: 0 when no HTTP answer came (refused, reset, a failed handshake).
pub fn status_of(curl: &mut Command) -> u16 {
    let out = curl
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}
