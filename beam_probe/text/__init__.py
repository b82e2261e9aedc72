"""All wording and drawing: tables, diff, trace, watch view, plot,
chart, syntax. Results in, text out; nothing below imports it."""
