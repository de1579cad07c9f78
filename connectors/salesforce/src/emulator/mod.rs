//! An emulator of the Salesforce REST API and Bulk API 2.0 (in progress).
