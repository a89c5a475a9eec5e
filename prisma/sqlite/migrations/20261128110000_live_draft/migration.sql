-- CreateTable
CREATE TABLE "LiveDraft" (
    "sessionId" TEXT NOT NULL PRIMARY KEY,
    "turnId" TEXT NOT NULL,
    "stepKey" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "updatedAt" DATETIME NOT NULL
);
