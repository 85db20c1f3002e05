//! The spelling of a fieldless enum, from one table: [`spelled!`].

/// Gives a fieldless enum its spelling from one table of variants and texts:
///
/// - `ALL`, every variant in the table's order;
/// - the `const fn` named by the table, which answers a variant's text;
/// - [`Display`](std::fmt::Display), which writes that text;
/// - [`FromStr`](std::str::FromStr), which reads it back in any case: the variant whose
///   text equals (ignoring ASCII case) the input, or what the method named on it makes of
///   it (`text.trim()`), else the error the expression after `else` makes.
///
/// Each part takes the doc comments written before it.
macro_rules! spelled {
    (
        $ty:ident;
        $(#[$all_doc:meta])*
        ALL;
        $(#[$spelling_doc:meta])*
        fn $spelling:ident {
            $($variant:ident => $text:literal,)+
        }
        $(#[$parse_doc:meta])*
        from_str($input:ident $(.$adapt:ident())?) -> Result<_, $error:ty> else $err:expr;
    ) => {
        impl $ty {
            $(#[$all_doc])*
            pub const ALL: [$ty; [$($text),+].len()] = [$($ty::$variant),+];

            $(#[$spelling_doc])*
            pub const fn $spelling(self) -> &'static str {
                match self {
                    $($ty::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.$spelling())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $error;

            $(#[$parse_doc])*
            fn from_str($input: &str) -> Result<Self, Self::Err> {
                $(let $input = $input.$adapt();)?
                Self::ALL
                    .into_iter()
                    .find(|each| each.$spelling().eq_ignore_ascii_case($input))
                    .ok_or_else(|| $err)
            }
        }
    };
}

pub(crate) use spelled;

#[cfg(test)]
mod tests {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Fruit {
        Apple,
        Pear,
    }

    #[derive(Debug, PartialEq, Eq)]
    struct NoFruit(String);

    spelled! {
        Fruit;
        ALL;
        fn as_str {
            Apple => "apple",
            Pear => "PEAR",
        }
        from_str(text.trim()) -> Result<_, NoFruit> else NoFruit(text.to_owned());
    }

    #[test]
    fn every_spelling_is_written_and_read_back_in_any_case() {
        assert_eq!(Fruit::ALL, [Fruit::Apple, Fruit::Pear]);
        assert_eq!(Fruit::Pear.as_str(), "PEAR");
        for fruit in Fruit::ALL {
            assert_eq!(fruit.to_string(), fruit.as_str());
            for text in [fruit.as_str().to_lowercase(), fruit.as_str().to_uppercase()] {
                assert_eq!(text.parse(), Ok(fruit));
            }
        }
        // What the table's expression makes of the input is what is read, and what the
        // error is made of.
        assert_eq!(" pear ".parse(), Ok(Fruit::Pear));
        assert_eq!("plum ".parse::<Fruit>(), Err(NoFruit("plum".into())));
    }
}
