use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use crate::io::ReadBuf;
use crate::net::Socket;

impl Socket for TcpStream {
    fn try_read(&mut self, mut buf: &mut dyn ReadBuf) -> io::Result<usize> {
        // Requires `&mut impl BufMut`
        self.try_read_buf(&mut buf)
    }

    fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (*self).try_write(buf)
    }

    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (*self).poll_read_ready(cx)
    }

    fn poll_write_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (*self).poll_write_ready(cx)
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self).poll_shutdown(cx)
    }

    fn peek_pending(&self) -> Option<bool> {
        peek_pending(socket2::SockRef::from(self))
    }
}

#[cfg(unix)]
impl Socket for tokio::net::UnixStream {
    fn try_read(&mut self, mut buf: &mut dyn ReadBuf) -> io::Result<usize> {
        self.try_read_buf(&mut buf)
    }

    fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (*self).try_write(buf)
    }

    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (*self).poll_read_ready(cx)
    }

    fn poll_write_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (*self).poll_write_ready(cx)
    }

    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self).poll_shutdown(cx)
    }

    fn peek_pending(&self) -> Option<bool> {
        peek_pending(socket2::SockRef::from(self))
    }
}

/// Peeks one byte without waiting: the socket is non-blocking, so an empty
/// receive queue answers `WouldBlock`; the end of the stream reads 0 bytes.
fn peek_pending(socket: socket2::SockRef<'_>) -> Option<bool> {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    match socket.peek(&mut byte) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(false),
        Ok(_) | Err(_) => Some(true),
    }
}
