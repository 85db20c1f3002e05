//! Methods on `&self`, `&mut self`, `self`, generic impls and trait impls.
#![deny(warnings)]

use std::fmt::Display;

use redis_ratelimit::{rate_limiter, RateLimitError};

fn assert_send<T: Send>(_: T) {}

pub struct Service<T> {
    tenant: String,
    items: Vec<T>,
}

impl<T: Clone + Send + Sync> Service<T> {
    #[rate_limiter(rules("5/second"), limit_type = CUSTOM, by = self.tenant)]
    pub async fn get(&self, index: usize) -> Result<Option<T>, RateLimitError> {
        Ok(self.items.get(index).cloned())
    }

    #[rate_limiter(rules("5/second"), limit_type = USER_ID)]
    pub async fn push(&mut self, item: T) -> Result<usize, RateLimitError> {
        self.items.push(item);
        Ok(self.items.len())
    }

    #[rate_limiter(rules("5/second"), limit_type = CUSTOM, by = self.tenant)]
    pub async fn into_items(self) -> Result<Vec<T>, RateLimitError> {
        Ok(self.items)
    }

    #[rate_limiter(rules("5/second"), limit_type = CUSTOM, by = label)]
    pub async fn describe<'a, L>(&'a self, label: L) -> Result<&'a str, RateLimitError>
    where
        L: Display + Send,
    {
        Ok(&self.tenant)
    }
}

trait Store {
    async fn load(&self, id: u64) -> Result<String, RateLimitError>;
}

impl<T: Send + Sync> Store for Service<T> {
    #[rate_limiter(rules("5/second"), limit_type = CUSTOM, by = id)]
    async fn load(&self, id: u64) -> Result<String, RateLimitError> {
        Ok(format!("{}:{id}", self.tenant))
    }
}

fn main() {
    let mut service = Service {
        tenant: "acme".to_owned(),
        items: vec![1u8],
    };
    assert_send(service.get(0));
    assert_send(service.describe("x"));
    assert_send(service.load(1));
    assert_send(service.push(2));
    assert_send(service.into_items());
}
