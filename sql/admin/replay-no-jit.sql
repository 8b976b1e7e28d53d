-- replay-no-jit: turn JIT compilation off for the rest of a replay step's transaction (before replay-step): the
--                planner costs a re-drive's look-up of dead deliveries per item, far above what it reads (the dead
--                rows once, hashed), and compiling that plan took most of a step's time.
-- index: none
-- params: none
-- returns: one row, jit ('off')
SELECT set_config('jit', 'off', true) AS jit
