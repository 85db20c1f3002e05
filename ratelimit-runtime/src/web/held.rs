//! The slots a request's guards took (calls in flight, [`Guard::concurrency`]), held until
//! its response has been sent: a streamed answer holds them to its end.
//!
//! [`Guard::concurrency`]: crate::Guard::concurrency

use std::fmt;

use crate::Slot;

/// Slots held by one request, released when dropped (see [`Slot`]). Public only in name:
/// it appears in [`RefusalBody::holding`](crate::tower::RefusalBody::holding).
#[derive(Default)]
pub struct HeldSlots(Vec<Slot>);

impl HeldSlots {
    pub(crate) fn hold(&mut self, slot: Slot) {
        self.0.push(slot);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for HeldSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HeldSlots").field(&self.0.len()).finish()
    }
}

#[cfg(feature = "tower")]
pub(crate) use body::SlotBody;

#[cfg(feature = "tower")]
mod body {
    use std::pin::Pin;
    use std::task::{ready, Context, Poll};

    use http_body::{Body, Frame, SizeHint};

    use super::HeldSlots;

    pin_project_lite::pin_project! {
        /// A response body that holds its request's slots until it has been sent to its
        /// end (or dropped: the client went away).
        pub(crate) struct SlotBody<B> {
            #[pin]
            inner: B,
            held: Option<HeldSlots>,
        }
    }

    impl<B> SlotBody<B> {
        pub(crate) fn new(inner: B, held: HeldSlots) -> Self {
            SlotBody {
                inner,
                held: Some(held),
            }
        }
    }

    impl<B: Body> Body for SlotBody<B> {
        type Data = B::Data;
        type Error = B::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            let this = self.project();
            let frame = ready!(this.inner.poll_frame(cx));
            if frame.is_none() {
                // Sent to its end: the call is over.
                this.held.take();
            }
            Poll::Ready(frame)
        }

        fn is_end_stream(&self) -> bool {
            self.inner.is_end_stream()
        }

        fn size_hint(&self) -> SizeHint {
            self.inner.size_hint()
        }
    }
}
