"""What a handler returns. Anything that is not a :class:`Result` or a
:class:`Stream` is sent as a JSON document (``application/json``, at most
1 MiB); a :class:`Result` or :class:`Stream` sends bytes in one of the
kind's declared ``result_media_types`` (at most 256 MiB), streamed."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import IO, Any

from ._http import BytesBody, dumps
from ._reports import JsonDocument

__all__ = ["Result", "Stream"]

Chunk = bytes | bytearray | memoryview | str

# Past this, a streamed result kept for its retries goes to a file.
SPOOL_IN_MEMORY = 8 * 1024 * 1024
READ_BACK = 256 * 1024


class Result:
    """A whole result in a media type the kind declares, such as
    ``Result(csv_text, "text/csv")``. A ``str`` is sent as UTF-8."""

    def __init__(self, body: bytes | bytearray | memoryview | str, media_type: str) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError("Result takes bytes or str; use Stream for an iterator of bytes")
        self.body = bytes(body)
        self.media_type = _check_media_type(media_type)

    def __repr__(self) -> str:
        return f"Result({len(self.body)} bytes, {self.media_type!r})"


class Stream:
    """A result produced piece by piece, in a media type the kind declares:
    ``Stream(rows_as_csv(), "text/csv")``. The pieces (``bytes`` or ``str``,
    sent as UTF-8) are sent as they come, never held whole in memory; a
    copy is kept (in memory up to 8 MiB, then in a temporary file) so that
    the complete can be sent again, the same, if its answer is lost.

    The sync :class:`~receipt_worker.Worker` takes an iterable; the
    :class:`~receipt_worker.AsyncWorker` an iterable or an async iterable.
    An exception raised while the pieces are produced ends the attempt as
    a handler's exception does (a retryable failure, unless it is
    :class:`~receipt_worker.Permanent`)."""

    def __init__(self, chunks: Iterable[Chunk] | AsyncIterable[Chunk], media_type: str) -> None:
        if isinstance(chunks, (bytes, bytearray, memoryview, str)):
            raise TypeError("Stream takes an iterable of pieces; use Result for one bytes or str")
        self.chunks = chunks
        self.media_type = _check_media_type(media_type)

    def __repr__(self) -> str:
        return f"Stream({self.media_type!r})"


def _check_media_type(media_type: str) -> str:
    media_type = media_type.strip()
    if "/" not in media_type:
        raise ValueError(f"not a media type: {media_type!r}")
    return media_type


class InvalidResult(Exception):
    """A handler returned something that cannot be sent."""


class SourceFailed(Exception):
    """The iterable of a :class:`Stream` raised; ``__cause__`` is what it
    raised."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the result's stream failed: {type(error).__name__}: {error}")
        self.error = error


def _as_bytes(piece: Any) -> bytes:
    if isinstance(piece, str):
        return piece.encode("utf-8")
    if isinstance(piece, (bytes, bytearray, memoryview)):
        return bytes(piece)
    raise InvalidResult(f"a Stream's pieces are bytes or str, not {type(piece).__name__}")


class _Spool:
    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)
        self.complete = False

    def replay(self) -> Iterator[bytes]:
        self.file.seek(0)
        while True:
            data = self.file.read(READ_BACK)
            if not data:
                return
            yield data

    def close(self) -> None:
        self.file.close()


class StreamBody:
    """A :class:`Stream` as a request body: the first try sends the pieces
    as they come (keeping a copy); a later try first reads what the first
    did not, then sends the copy."""

    def __init__(self, stream: Stream) -> None:
        self.content_type = stream.media_type
        self._source = stream.chunks
        self._iterator: Iterator[Any] | None = None
        self._async_iterator: AsyncIterator[Any] | None = None
        self._spool = _Spool()
        self._started = False

    # -- sync ------------------------------------------------------------
    def for_try(self, tries: int) -> Iterator[bytes]:
        if not self._started:
            self._started = True
            if not isinstance(self._source, Iterable):
                raise InvalidResult("the sync Worker's Stream takes an iterable, not an async one")
            self._iterator = iter(self._source)
            return self._first_pass()
        self._drain()
        return self._spool.replay()

    def _next(self) -> bytes | None:
        assert self._iterator is not None
        try:
            piece = next(self._iterator)
        except StopIteration:
            self._spool.complete = True
            return None
        except InvalidResult:
            raise
        except Exception as e:
            raise SourceFailed(e) from e
        data = _as_bytes(piece)
        self._spool.file.write(data)
        return data

    def _first_pass(self) -> Iterator[bytes]:
        while True:
            data = self._next()
            if data is None:
                return
            if data:
                yield data

    def _drain(self) -> None:
        while not self._spool.complete:
            self._next()

    # -- async -----------------------------------------------------------
    def for_try_async(self, tries: int) -> AsyncIterator[bytes]:
        if not self._started:
            self._started = True
            if isinstance(self._source, AsyncIterable):
                self._async_iterator = self._source.__aiter__()
            else:
                self._iterator = iter(self._source)
            return self._first_pass_async()
        return self._replay_async()

    async def _next_async(self) -> bytes | None:
        if self._async_iterator is None:
            return self._next()
        try:
            piece = await self._async_iterator.__anext__()
        except StopAsyncIteration:
            self._spool.complete = True
            return None
        except InvalidResult:
            raise
        except Exception as e:
            raise SourceFailed(e) from e
        data = _as_bytes(piece)
        self._spool.file.write(data)
        return data

    async def _first_pass_async(self) -> AsyncIterator[bytes]:
        while True:
            data = await self._next_async()
            if data is None:
                return
            if data:
                yield data

    async def _replay_async(self) -> AsyncIterator[bytes]:
        while not self._spool.complete:
            await self._next_async()
        for data in self._spool.replay():
            yield data

    def close(self) -> None:
        self._spool.close()


def body_of(value: Any) -> BytesBody | StreamBody:
    """The complete's body for what a handler returned."""
    if isinstance(value, Result):
        return BytesBody(value.body, value.media_type)
    if isinstance(value, Stream):
        return StreamBody(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidResult(
            "a handler returned bytes: wrap them in Result(body, media_type) with a media "
            "type the kind declares"
        )
    try:
        return JsonDocument(dumps(value), "application/json")
    except (TypeError, ValueError) as e:
        raise InvalidResult(f"the result is not JSON: {e}") from e
