SELECT
  l_shipdate AS ship_date,
  l_returnflag,
  l_linestatus,
  sum(l_extendedprice * (1 - l_discount)) AS revenue,
  count(*) AS line_count
FROM lineitem
WHERE l_shipdate >= $window_start
  AND l_shipdate < $window_end
GROUP BY l_shipdate, l_returnflag, l_linestatus
