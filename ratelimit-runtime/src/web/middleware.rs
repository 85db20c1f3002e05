//! What the tower layer and the actix-web middleware are, written once: the [`Settings`]
//! both builders delegate to, the [`RequestContext`] they build for a request, and the
//! work around the inner service ([`Admission`], [`ResponseFuture`]).
//!
//! An integration only says how to read its request ([`Request`]: header lines; the peer
//! address is passed in) and where its response takes the rate-limit fields
//! ([`Response`]). Everything a request goes through before and after the inner service
//! happens in [`Settings::admit`] and [`ResponseFuture`], the one place both call.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::task::futures::TaskLocalFuture;

use crate::context::{self, DecisionSlot, RequestContext};
use crate::web::client_ip::ClientIpConfig;
use crate::web::fields::{self, FieldSink};
use crate::web::{InvalidProxyNet, ProxyHeader};

/// A framework's request, as the core reads it.
pub(crate) trait Request {
    /// The builder users configure for this kind of request, named in panic messages and
    /// `Debug` output.
    const BUILDER: &'static str;

    /// The raw values of the header called `name` (lower case), in order.
    fn header_lines(&self, name: &'static str) -> impl Iterator<Item = &[u8]>;
}

/// A framework's response, as the core describes it. Public only in name: it bounds
/// [`ResponseFuture`]'s `Future` impl.
pub trait Response {
    /// Where the rate-limit fields go.
    type Fields: FieldSink;

    /// Whether the response refuses the call for its rate (a 429, or a gRPC
    /// `RESOURCE_EXHAUSTED`): such a response gets a `Retry-After` when it lacks one.
    fn is_refusal(&self) -> bool;

    /// The fields to write into.
    fn fields(&mut self) -> &mut Self::Fields;
}

type UserIdFn<R> = dyn Fn(&R) -> Option<Arc<str>> + Send + Sync;
type ExemptFn<R> = dyn Fn(&R) -> bool + Send + Sync;

/// What a rate-limit middleware is configured with, for requests of type `R`: how to find
/// the client IP, the user id and the exemption. The public builders (tower's
/// `RateLimitLayer`, actix's `RateLimit`) hold one in an `Arc` and delegate every builder
/// method here.
pub(crate) struct Settings<R> {
    pub(crate) client_ip: ClientIpConfig,
    user_id: Option<Arc<UserIdFn<R>>>,
    exempt: Option<Arc<ExemptFn<R>>>,
}

impl<R> Clone for Settings<R> {
    fn clone(&self) -> Self {
        Settings {
            client_ip: self.client_ip.clone(),
            user_id: self.user_id.clone(),
            exempt: self.exempt.clone(),
        }
    }
}

impl<R> Default for Settings<R> {
    fn default() -> Self {
        Settings {
            client_ip: ClientIpConfig::default(),
            user_id: None,
            exempt: None,
        }
    }
}

impl<R: Request> Settings<R> {
    /// Adds trusted proxy networks.
    ///
    /// # Panics
    ///
    /// When a network does not parse, naming the builder's method and the network.
    pub(crate) fn trust_proxies<I>(&mut self, networks: I)
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        if let Err(err) = self.try_trust_proxies(networks) {
            panic!("{}::trust_proxies: {err}", R::BUILDER);
        }
    }

    /// Adds trusted proxy networks; none is added when one does not parse.
    pub(crate) fn try_trust_proxies<I>(&mut self, networks: I) -> Result<(), InvalidProxyNet>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.client_ip.trust(networks)
    }

    /// Sets the header trusted proxies write the client address in.
    pub(crate) fn proxy_header(&mut self, header: ProxyHeader) {
        self.client_ip.header = header;
    }

    /// Sets how many leading bits identify an IPv6 client.
    ///
    /// # Panics
    ///
    /// When `bits` is over 128, naming the builder's method.
    pub(crate) fn ipv6_prefix(&mut self, bits: u8) {
        assert!(
            bits <= 128,
            "{}::ipv6_prefix: an IPv6 prefix has at most 128 bits, not {bits}",
            R::BUILDER
        );
        self.client_ip.ipv6_prefix = bits;
    }

    /// Sets how to find a request's user id.
    pub(crate) fn user_id<F, U>(&mut self, user_id: F)
    where
        F: Fn(&R) -> Option<U> + Send + Sync + 'static,
        U: Into<Arc<str>>,
    {
        self.user_id = Some(Arc::new(move |req: &R| user_id(req).map(Into::into)));
    }

    /// Sets which requests are exempt.
    pub(crate) fn exempt<F>(&mut self, exempt: F)
    where
        F: Fn(&R) -> bool + Send + Sync + 'static,
    {
        self.exempt = Some(Arc::new(exempt));
    }

    /// Admits `req`, whose connection comes from `peer`: what the integration does before
    /// the inner service. The request's context holds the client IP, the user id and the
    /// exemption; run the inner service's future with [`Admission::run`].
    pub(crate) fn admit(&self, req: &R, peer: Option<IpAddr>) -> Admission {
        let mut ctx = RequestContext::new();
        if let Some(ip) = self
            .client_ip
            .client_ip(peer, |name| req.header_lines(name))
        {
            ctx = ctx.with_ip(ip);
        }
        if let Some(user_id) = self.user_id.as_ref().and_then(|f| f(req)) {
            ctx = ctx.with_user_id(user_id);
        }
        if self.exempt.as_ref().is_some_and(|f| f(req)) {
            ctx = ctx.with_exempt(true);
        }
        Admission {
            ctx,
            slot: Arc::new(DecisionSlot::default()),
        }
    }
}

impl<R: Request> fmt::Debug for Settings<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(R::BUILDER)
            .field("trusted_proxies", &self.client_ip.trusted)
            .field("proxy_header", &self.client_ip.header)
            .field("ipv6_prefix", &self.client_ip.ipv6_prefix)
            .field("user_id", &self.user_id.is_some())
            .field("exempt", &self.exempt.is_some())
            .finish()
    }
}

/// A request admitted by [`Settings::admit`]: the context its handlers see, and the slot
/// their guarded calls leave their decisions in.
pub(crate) struct Admission {
    ctx: RequestContext,
    slot: Arc<DecisionSlot>,
}

impl Admission {
    /// Runs `inner`, the inner service's future, as this request: inside its context (so a
    /// handler that turns a refusal into its response can say what the context lacked),
    /// keeping what its guarded calls decide for the response's fields.
    pub(crate) fn run<F: Future>(self, inner: F) -> ResponseFuture<F> {
        let recording = context::recording(Arc::clone(&self.slot), inner);
        ResponseFuture {
            inner: context::scope_future(self.ctx, recording),
            slot: self.slot,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of the rate-limit middleware: the inner service's, run inside
    /// the request's context. A response to a request that reached a guarded call carries
    /// that call's `RateLimit-Policy` and `RateLimit` fields (and `Retry-After` on a
    /// refusal that lacks one).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: TaskLocalFuture<RequestContext, TaskLocalFuture<Arc<DecisionSlot>, F>>,
        slot: Arc<DecisionSlot>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    T: Response,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(outcome) = this.slot.take() {
            let refused = response.is_refusal();
            fields::describe(&outcome, refused, response.fields());
        }
        Poll::Ready(Ok(response))
    }
}

/// The public builder methods of a rate-limit middleware whose `settings` field is an
/// `Arc<Settings<$request>>`, delegating to [`Settings`]: written once for tower's
/// `RateLimitLayerWith` and actix's `RateLimit` (`builder_methods!(ServiceRequest);` in an
/// `impl RateLimit` block).
macro_rules! builder_methods {
    ($request:ty) => {
        $crate::web::middleware::builder_methods!(@ trust_proxies, $request);
        $crate::web::middleware::builder_methods!(@ try_trust_proxies, $request);
        $crate::web::middleware::builder_methods!(@ proxy_header, $request);
        $crate::web::middleware::builder_methods!(@ ipv6_prefix, $request);
        $crate::web::middleware::builder_methods!(@ user_id, $request);
        $crate::web::middleware::builder_methods!(@ exempt, $request);

        /// Changes the settings, copying them first when a clone shares them.
        fn configure(
            mut self,
            change: impl FnOnce(&mut $crate::web::middleware::Settings<$request>),
        ) -> Self {
            change(::std::sync::Arc::make_mut(&mut self.settings));
            self
        }
    };
    (@ trust_proxies, $request:ty) => {
        /// Trusts the proxies in these networks (`"10.0.0.0/8"`, `"2001:db8::/32"`, or a
        /// single address such as `"127.0.0.2"`) to tell the client address in the
        /// [proxy header](Self::proxy_header). Adds to the networks already trusted.
        ///
        /// The header is walked from the right, skipping trusted hops: the first untrusted
        /// address is the client. A request from a peer outside these networks is counted
        /// under the peer's own address whatever headers it sends.
        ///
        /// # Panics
        ///
        /// When a network does not parse, with a message naming it: the networks are
        /// usually written in the code, like routes. Use
        /// [`try_trust_proxies`](Self::try_trust_proxies) for networks read from
        /// configuration at run time.
        pub fn trust_proxies<I>(self, networks: I) -> Self
        where
            I: IntoIterator,
            I::Item: AsRef<str>,
        {
            self.configure(|settings| settings.trust_proxies(networks))
        }
    };
    (@ try_trust_proxies, $request:ty) => {
        /// [`trust_proxies`](Self::trust_proxies), returning an error for a network that
        /// does not parse instead of panicking: for networks read from configuration at
        /// run time. None is added then.
        pub fn try_trust_proxies<I>(
            mut self,
            networks: I,
        ) -> Result<Self, $crate::web::InvalidProxyNet>
        where
            I: IntoIterator,
            I::Item: AsRef<str>,
        {
            ::std::sync::Arc::make_mut(&mut self.settings).try_trust_proxies(networks)?;
            Ok(self)
        }
    };
    (@ proxy_header, $request:ty) => {
        /// Which header the trusted proxies write the client address in (default
        /// [`ProxyHeader::XForwardedFor`]). Only that header is read.
        pub fn proxy_header(self, header: $crate::web::ProxyHeader) -> Self {
            self.configure(|settings| settings.proxy_header(header))
        }
    };
    (@ ipv6_prefix, $request:ty) => {
        /// How many leading bits of an IPv6 client address identify the client (default
        /// 64).
        ///
        /// One host usually holds a whole `/64` and can pick any address in it, so IPv6
        /// clients are counted per network: the context IP is the network address
        /// (`2001:db8:1:2::`). Use 128 to count every address apart, 56 or 48 for
        /// providers that hand out larger blocks.
        ///
        /// # Panics
        ///
        /// When `bits` is over 128.
        pub fn ipv6_prefix(self, bits: u8) -> Self {
            self.configure(|settings| settings.ipv6_prefix(bits))
        }
    };
    (@ user_id, $request:ty) => {
        /// How to find the user id of a request, for `limit_type = USER_ID`: typically
        /// from an extension your authentication middleware set (which must then run
        /// before this one: added after it, or wrapped after it in actix-web). `None`
        /// means an anonymous request; a `USER_ID` guard refuses it with
        /// [`RateLimitError::MissingIdentity`](crate::RateLimitError).
        pub fn user_id<F, U>(self, user_id: F) -> Self
        where
            F: Fn(&$request) -> Option<U> + Send + Sync + 'static,
            U: Into<::std::sync::Arc<str>>,
        {
            self.configure(|settings| settings.user_id(user_id))
        }
    };
    (@ exempt, $request:ty) => {
        /// Which requests are exempt: guarded calls made while serving them skip the check
        /// (see [`RequestContext::with_exempt`](crate::RequestContext::with_exempt)). The
        /// closure runs once per request.
        ///
        /// Exempting is the application's decision: an exempt request is not counted and
        /// never refused, so anyone who can make a request look exempt bypasses every
        /// limit. Decide from what a client cannot forge, such as the peer address of your
        /// monitoring network or a role your authentication set, never from a header or a
        /// path alone.
        pub fn exempt<F>(self, exempt: F) -> Self
        where
            F: Fn(&$request) -> bool + Send + Sync + 'static,
        {
            self.configure(|settings| settings.exempt(exempt))
        }
    };
}

pub(crate) use builder_methods;
