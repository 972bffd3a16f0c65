"""The report document (the one contract), its views (JUnit, text, HTML) and their atomic files."""
