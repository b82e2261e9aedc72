"""JSON lines over time: check --history and watch -o write them,
plot and the trend rule read them."""
