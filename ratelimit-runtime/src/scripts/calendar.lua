    -- A rule counting in calendar periods (algorithm/calendar.rs) comes with window -1 (a
    -- UTC day), -2 (a UTC month) or -3 (a UTC year). Here, before its record is looked up: the period
    -- holding `moment` (the check's time, or the time a refunded check was counted at),
    -- from period_start to period_end (µs), and the window its record is stored under,
    -- -(4 * the period's first day since the epoch + 1, 2 or 3), so that a record of another
    -- period is not found and decides like no record. Days and civil dates convert by
    -- Howard Hinnant's civil_from_days and days_from_civil (calendar.rs), on doubles that
    -- stay integers far below 2^53.
    --
    -- Reads `moment`; sets `window`; defines `period_start`, `period_end`.
    local period_start, period_end
    if window < 0 then
        local r = moment % 86400000000
        if r < 0 then
            r = r + 86400000000
        end
        local day = (moment - r) / 86400000000
        local first_day, next_day = day, day + 1
        if window <= -2 then
            -- civil_from_days: the day of the month, and the year.
            local z = day + 719468
            local era = math.floor(z / 146097)
            local doe = z - era * 146097
            local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                - math.floor(doe / 146096)) / 365)
            local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
            local mp = math.floor((5 * doy + 2) / 153)
            local d = doy - math.floor((153 * mp + 2) / 5) + 1
            local m = mp + 3
            if mp >= 10 then
                m = mp - 9
            end
            local y = yoe + era * 400
            if m <= 2 then
                y = y + 1
            end
            first_day = day - (d - 1)
            -- days_from_civil of the next period's first day: the next month's, or the
            -- next year's January 1 (and a year starts on its own).
            if window == -3 then
                -- days_from_civil(y, 1, 1): January counts in the March-based year before.
                era = math.floor((y - 1) / 400)
                yoe = y - 1 - era * 400
                first_day = era * 146097 + yoe * 365 + math.floor(yoe / 4)
                    - math.floor(yoe / 100) + 306 - 719468
                y, m = y + 1, 1
            elseif m == 12 then
                y, m = y + 1, 1
            else
                m = m + 1
            end
            if m <= 2 then
                y = y - 1
            end
            era = math.floor(y / 400)
            yoe = y - era * 400
            mp = (m + 9) % 12
            doy = math.floor((153 * mp + 2) / 5)
            doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
            next_day = era * 146097 + doe - 719468
        end
        period_start, period_end = first_day * 86400000000, next_day * 86400000000
        window = window - 4 * first_day
    end
