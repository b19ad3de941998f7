//! NDJSON framing (conductor.md §7.2): one JSON value per `\n`-terminated line, size-capped.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Largest message in either direction: 16 MiB, as upstream (§7.2).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// What one [`read_line`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// A line (without its `\n`) is in the buffer. A final unterminated line counts.
    Line,
    /// The peer closed the connection before sending anything more.
    Eof,
    /// The line grew past the limit; the stream position is now undefined.
    TooLarge,
}

/// Read one line into `buf` (cleared first), refusing lines longer than `max` bytes
/// without ever buffering more than `max` bytes of it.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                if buf.len() + i > max {
                    return Ok(LineRead::TooLarge);
                }
                buf.extend_from_slice(&available[..i]);
                reader.consume(i + 1);
                return Ok(LineRead::Line);
            }
            None => {
                let n = available.len();
                if buf.len() + n > max {
                    return Ok(LineRead::TooLarge);
                }
                buf.extend_from_slice(available);
                reader.consume(n);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_capped() {
        let data: &[u8] = b"{\"a\":1}\nxxxxxxxxxxxx\ntail";
        let mut reader = tokio::io::BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"{\"a\":1}");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            LineRead::TooLarge
        );
        let mut reader = tokio::io::BufReader::new(&b"tail"[..]);
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"tail");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            LineRead::Eof
        );
    }
}
