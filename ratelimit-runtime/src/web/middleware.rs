//! What the tower layer and the actix-web middleware are, written once: the [`Settings`]
//! both builders delegate to, the [`RequestContext`] they build for a request, and the
//! work around the inner service ([`AdmittedRequest`], [`ResponseFuture`]): the layer's guards,
//! then the inner service, then the rate-limit fields of the response.
//!
//! An integration only says how to read its request ([`Request`]: header lines; the peer
//! address is passed in), where its response takes the rate-limit fields ([`Response`]),
//! and how to call its inner service later or answer a refusal instead ([`InnerCall`]).
//! Everything a request goes through before and after the inner service happens in
//! [`Settings::admit`] and [`ResponseFuture`], the one place both call.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::task::futures::TaskLocalFuture;

use crate::context::{self, DecisionSlot, RequestContext};
use crate::guard::GuardSite;
use crate::web::client_ip::ClientIpConfig;
use crate::web::fields::{self, FieldSink};
use crate::web::held::HeldSlots;
use crate::web::{InvalidProxyNet, ProxyHeader};
use crate::{Guard, RateLimitError};

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

/// A request's call of the inner service, not made yet: made once the layer's guards admit
/// the request, or answered by their refusal instead. Public only in name: it bounds
/// [`ResponseFuture`]'s `Future` impl.
pub trait InnerCall {
    /// The inner service's future.
    type Future: Future<Output = Result<Self::Served, Self::Error>>;
    /// The inner service's response.
    type Served;
    /// The middleware's response: the inner service's, or a refusal.
    type Response: Response;
    /// The inner service's error.
    type Error;

    /// Calls the inner service with the request.
    fn call(self) -> Self::Future;

    /// The middleware's response for the inner service's.
    fn served(response: Self::Served) -> Self::Response;

    /// The answer to the request a guard refused with `err`, instead of the inner
    /// service's: the one a guarded handler's refusal gets. Built inside the request's
    /// context, so that a missing identity's answer can say what the layer lacked.
    fn refuse(self, err: RateLimitError) -> Self::Response;

    /// The response holding `held`, the slots the request's guards took, until it has
    /// been sent (see [`Guard::concurrency`](crate::Guard::concurrency)); by default they
    /// are released as the response is handed over.
    fn hold(response: Self::Response, held: HeldSlots) -> Self::Response {
        drop(held);
        response
    }
}

type UserIdFn<R> = dyn Fn(&R) -> Option<Arc<str>> + Send + Sync;
type ExemptFn<R> = dyn Fn(&R) -> bool + Send + Sync;

/// What a rate-limit middleware is configured with, for requests of type `R`: how to find
/// the client IP, the user id and the exemption, and the guards every request is checked
/// against. The public builders (tower's `RateLimitLayer`, actix's `RateLimit`) hold one in
/// an `Arc` and delegate every builder method here.
pub(crate) struct Settings<R> {
    pub(crate) client_ip: ClientIpConfig,
    user_id: Option<Arc<UserIdFn<R>>>,
    exempt: Option<Arc<ExemptFn<R>>>,
    /// In the order added; shared with the checks of the requests being served.
    guards: Arc<[GuardSite]>,
}

impl<R> Clone for Settings<R> {
    fn clone(&self) -> Self {
        Settings {
            client_ip: self.client_ip.clone(),
            user_id: self.user_id.clone(),
            exempt: self.exempt.clone(),
            guards: Arc::clone(&self.guards),
        }
    }
}

impl<R> Default for Settings<R> {
    fn default() -> Self {
        Settings {
            client_ip: ClientIpConfig::default(),
            user_id: None,
            exempt: None,
            guards: Arc::new([]),
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

    /// Adds a guard, checked after those already added.
    pub(crate) fn guard(&mut self, guard: Guard) {
        let mut guards = self.guards.to_vec();
        guards.push(GuardSite::from(guard));
        self.guards = guards.into();
    }

    /// Admits `req`, whose connection comes from `peer`: what the integration does before
    /// the inner service. The request's context holds the client IP, the user id and the
    /// exemption. Unless the admission [checks guards](AdmittedRequest::checks_guards), run the
    /// inner service's future with [`AdmittedRequest::run`]; else give the call to
    /// [`AdmittedRequest::run_guarded`].
    pub(crate) fn admit(&self, req: &R, peer: Option<IpAddr>) -> AdmittedRequest {
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
        let exempt = self.exempt.as_ref().is_some_and(|f| f(req));
        if exempt {
            ctx = ctx.with_exempt(true);
        }
        // An exempt request skips every check, the layer's as its handlers'.
        let guards = (!exempt && !self.guards.is_empty()).then(|| Arc::clone(&self.guards));
        AdmittedRequest {
            ctx,
            slot: Arc::new(DecisionSlot::default()),
            guards,
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
            .field("guards", &GuardNames(&self.guards))
            .finish()
    }
}

/// The names of a layer's guards, for `Debug`.
struct GuardNames<'a>(&'a [GuardSite]);

impl fmt::Debug for GuardNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(GuardSite::name))
            .finish()
    }
}

/// A request admitted by [`Settings::admit`]: the context its handlers see, the slot
/// their guarded calls (and the layer's guards) leave their decisions in, and the guards
/// it is to be checked against, if any.
pub(crate) struct AdmittedRequest {
    ctx: RequestContext,
    slot: Arc<DecisionSlot>,
    /// `None` when the layer has no guards, or the request is exempt.
    guards: Option<Arc<[GuardSite]>>,
}

/// The checks of a request against a layer's guards, in order, up to the first refusal.
/// What they give: the slots the guards with a concurrency limit took, held until the
/// response has been sent.
type GuardChecks = Pin<Box<dyn Future<Output = Result<HeldSlots, RateLimitError>> + Send>>;

impl AdmittedRequest {
    /// Whether guards are to check the request before the inner service is called: then
    /// the call goes to [`run_guarded`](Self::run_guarded), not made yet.
    pub(crate) fn checks_guards(&self) -> bool {
        self.guards.is_some()
    }

    /// Runs `inner`, the inner service's future for a request no guard is to check, as
    /// this request: inside its context (so a handler that turns a refusal into its
    /// response can say what the context lacked), keeping what its guarded calls decide for
    /// the response's fields.
    pub(crate) fn run<C: InnerCall>(self, inner: C::Future) -> ResponseFuture<C> {
        debug_assert!(
            self.guards.is_none(),
            "a guarded request runs with run_guarded"
        );
        self.serve(Stage::Serving {
            future: inner,
            held: None,
        })
    }

    /// Checks the request against the layer's guards, then makes `call` if they all admit
    /// it, else answers with the first refusal; as [`run`](Self::run) otherwise.
    pub(crate) fn run_guarded<C: InnerCall>(mut self, call: C) -> ResponseFuture<C> {
        let stage = match self.guards.take() {
            None => Stage::Serving {
                future: call.call(),
                held: None,
            },
            Some(guards) => Stage::Guarding {
                checks: Box::pin(async move {
                    let mut held = HeldSlots::default();
                    // The guards that can be are one list: one round trip, and a refusal
                    // by one consumes nothing from the others. The rest after them.
                    crate::guard::check_listed(&guards).await?;
                    for guard in guards.iter().filter(|guard| !guard.is_listed()) {
                        if let Some(slot) = guard.check().await? {
                            held.hold(slot);
                        }
                    }
                    Ok(held)
                }),
                call: Some(call),
            },
        };
        self.serve(stage)
    }

    fn serve<C: InnerCall>(self, stage: Stage<C>) -> ResponseFuture<C> {
        let recording = context::recording(Arc::clone(&self.slot), stage);
        ResponseFuture {
            inner: context::scope_future(self.ctx, recording),
            slot: self.slot,
        }
    }
}

pin_project_lite::pin_project! {
    /// Where a request is, inside its context: checked by the layer's guards, or served
    /// by the inner service.
    #[project = StageProjection]
    enum Stage<C>
    where
        C: InnerCall,
    {
        Guarding {
            checks: GuardChecks,
            // Taken when the checks end.
            call: Option<C>,
        },
        Serving {
            #[pin]
            future: C::Future,
            // The slots of the guards that admitted the request.
            held: Option<HeldSlots>,
        },
    }
}

impl<C: InnerCall> Future for Stage<C> {
    type Output = Result<C::Response, C::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                StageProjection::Serving { future, held } => {
                    let response = ready!(future.poll(cx)).map(C::served);
                    return Poll::Ready(response.map(|response| match held.take() {
                        Some(held) if !held.is_empty() => C::hold(response, held),
                        _ => response,
                    }));
                }
                StageProjection::Guarding { checks, call } => {
                    let checked = ready!(checks.as_mut().poll(cx));
                    let call = call
                        .take()
                        .expect("a response future polled after it ended");
                    match checked {
                        Ok(held) => self.set(Stage::Serving {
                            future: call.call(),
                            held: Some(held),
                        }),
                        Err(refusal) => return Poll::Ready(Ok(call.refuse(refusal))),
                    }
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of the rate-limit middleware: the layer's guards' checks, then
    /// the inner service's future, run inside the request's context. A request a guard
    /// refuses never reaches the inner service. A response to a request that reached a
    /// guard or a guarded call carries the `RateLimit-Policy` and `RateLimit` fields of the
    /// decision that binds hardest (and `Retry-After` on a refusal that lacks one).
    pub struct ResponseFuture<C>
    where
        C: InnerCall,
    {
        #[pin]
        inner: TaskLocalFuture<RequestContext, TaskLocalFuture<Arc<DecisionSlot>, Stage<C>>>,
        slot: Arc<DecisionSlot>,
    }
}

impl<C: InnerCall> fmt::Debug for ResponseFuture<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<C: InnerCall> Future for ResponseFuture<C> {
    type Output = Result<C::Response, C::Error>;

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
        $crate::web::middleware::builder_methods!(@ guard, $request);

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
    (@ guard, $request:ty) => {
        /// Checks every request against `guard` before it reaches the inner service: the
        /// rules of an attribute, written on the router (see [`Guard`](crate::Guard)).
        /// Guards are checked in the order added; the first refusal answers, as a guarded
        /// handler's refusal does (429 with `Retry-After` and the RateLimit fields, 500
        /// for a missing identity, 503 for a fail-closed backend failure), and the inner
        /// service is not called. [Exempt](Self::exempt) requests are not checked.
        ///
        /// The guard's decision is described in the response's RateLimit fields, unless a
        /// guarded call of the handler binds harder: a response describes the most
        /// restrictive decision taken for its request.
        ///
        /// Adding a guard registers its name, so that the limiter's `rules_in_force` and
        /// `mode_in_force` know it.
        pub fn guard(self, guard: $crate::Guard) -> Self {
            self.configure(|settings| settings.guard(guard))
        }
    };
}

pub(crate) use builder_methods;
