-- v13 repair (learning.md §4 step 2c): patterns never applied were left with a priority
-- below the exploitation threshold by older code; put them back at the neutral 0.5.
UPDATE patterns SET priority_score = 0.5
 WHERE (led_to_success_count + led_to_failure_count) = 0 AND priority_score < 0.3;
