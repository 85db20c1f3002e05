    -- The token bucket's emission interval T = ceil(window / count) (algorithm/
    -- token_bucket.rs), for one rule, in its check and its refund.
    --
    -- Reads `window`, `count`; defines `interval`.
    local interval = window % count
    if interval < 0 then
        interval = interval + count
    end
    if interval > 0 then
        interval = (window - interval) / count + 1
    else
        interval = window / count
    end
