//! Writing an [`Answer`] on a client stream Pingora's session does not own: the front's
//! refusals and CONNECT answers. The header fields are the answer's own
//! ([`Answer::fields`]); this adds only the status line and `Connection: close`.

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::policy::answer::Answer;

/// Writes `answer` as a complete HTTP/1.1 response, then closes the stream.
pub async fn write_answer<S: AsyncWrite + Unpin + ?Sized>(stream: &mut S, answer: &Answer) {
    let reason = http::StatusCode::from_u16(answer.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (name, value) in answer.fields() {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(&value);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&answer.body).await;
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
}
