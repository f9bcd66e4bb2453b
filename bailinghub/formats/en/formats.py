"""The console's date and time formats: one way everywhere, the way its own lists and the task,
approval and invocation pages write times ("2026-12-05 21:55 UTC", apps.core.timefmt.local_time),
with the time zone's name, since times are shown in TIME_ZONE (UTC unless set) while agents and
business systems report their own. Django's English defaults ("Dec. 5, 2026, 9:55 p.m.") were left
on the pages that print a model's date fields as they are."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
TIME_FORMAT = "H:i T"
