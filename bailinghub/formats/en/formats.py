"""The console's date and time formats: Django's English ones with the time zone's name, since
times are shown in TIME_ZONE (UTC unless set) while agents and business systems report their own."""

DATETIME_FORMAT = "N j, Y, P T"
SHORT_DATETIME_FORMAT = "m/d/Y P T"
TIME_FORMAT = "P T"
