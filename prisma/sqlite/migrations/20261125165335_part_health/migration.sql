-- CreateTable
CREATE TABLE "PartHealth" (
    "part" TEXT NOT NULL PRIMARY KEY,
    "state" TEXT NOT NULL,
    "detail" TEXT NOT NULL,
    "since" DATETIME NOT NULL,
    "lastOkAt" DATETIME,
    "checkedAt" DATETIME NOT NULL,
    "notifiedAt" DATETIME
);
